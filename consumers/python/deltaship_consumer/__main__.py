"""``python -m deltaship_consumer``: rebuild state from a topic, a stream or a recorded
stream (a test vector's kafka.jsonl or nats.jsonl) and print it as JSON:
``{"<apiVersion>/<Kind>": {"<key>": object}}``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from .decode import BadRecord
from .protocol import Consumer
from .readers import read_jetstream, read_kafka


def read_records(path: str, consumer: Consumer) -> None:
    """A recorded stream: Kafka records or JetStream messages as JSON lines."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            r = json.loads(line)
            try:
                if "topic" in r:
                    value = None if r["value"] is None else r["value"].encode()
                    consumer.kafka_record(r["partition"], r["key"], [(k, v.encode()) for k, v in r["headers"]], value)
                else:
                    consumer.nats_message(r["headers"], r["data"].encode())
            except BadRecord as e:
                print(f"skipped record {path}:{n}: {e}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="deltaship-rebuild", description=__doc__)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--kafka", metavar="BROKERS", help="Kafka bootstrap servers; read every --topic")
    source.add_argument("--nats", metavar="URL", help="NATS server URL; read the --stream")
    source.add_argument("--records", metavar="FILE", help="a recorded stream (vectors/*/kafka.jsonl or nats.jsonl)")
    p.add_argument("--topic", action="append", default=[], help="a Kafka topic (repeat for several)")
    p.add_argument("--stream", help="the JetStream stream")
    p.add_argument("--cluster", help="apply only this cluster's events")
    args = p.parse_args(argv)
    consumer = Consumer(cluster=args.cluster)
    try:
        if args.records:
            read_records(args.records, consumer)
        elif args.kafka:
            if not args.topic:
                p.error("--kafka needs --topic")
            read_kafka(args.kafka, args.topic, consumer)
        else:
            if not args.stream:
                p.error("--nats needs --stream")
            asyncio.run(read_jetstream(args.nats, args.stream, consumer))
    except (OSError, RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    json.dump(consumer.state, sys.stdout, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
