"""``python -m deltaship_consumer``: rebuild state from a topic, a stream or a recorded
stream (a test vector's kafka.jsonl or nats.jsonl) and print it as JSON:
``{"<apiVersion>/<Kind>": {"<key>": object}}``. Records that cannot be applied are skipped,
each reported on stderr (``skipped record <where>: <reason>: <problem>``), and counted by
reason in a last stderr line. A ``sync.completed`` marker whose count and digest do not match
the state held is reported on stderr (``state mismatch at marker ...``); with ``--verify`` a
last line ``verification: {"verified": N, "mismatched": M}`` follows and the exit code is 3
when M > 0."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from .protocol import Consumer
from .records import read_records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="deltaship-rebuild", description=__doc__)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--kafka", metavar="BROKERS", help="Kafka bootstrap servers; read every --topic")
    source.add_argument("--nats", metavar="URL", help="NATS server URL; read the --stream")
    source.add_argument("--records", metavar="FILE", help="a recorded stream (vectors/*/kafka.jsonl or nats.jsonl)")
    p.add_argument("--topic", action="append", default=[], help="a Kafka topic (repeat for several)")
    p.add_argument("--stream", help="the JetStream stream")
    p.add_argument("--cluster", help="apply only this cluster's events")
    p.add_argument("--verify", action="store_true", help="exit 3 when a marker's count and digest did not match the state held")
    args = p.parse_args(argv)
    consumer = Consumer(cluster=args.cluster)
    try:
        if args.records:
            read_records(args.records, consumer)
        elif args.kafka:
            from .readers import read_kafka

            if not args.topic:
                p.error("--kafka needs --topic")
            read_kafka(args.kafka, args.topic, consumer)
        else:
            from .readers import read_jetstream

            if not args.stream:
                p.error("--nats needs --stream")
            asyncio.run(read_jetstream(args.nats, args.stream, consumer))
    except (ImportError, OSError, RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    json.dump(consumer.state, sys.stdout, sort_keys=True, allow_nan=False)
    print()
    if consumer.skipped:
        print(f"skipped {sum(consumer.skipped.values())} records: {json.dumps(consumer.skipped, sort_keys=True)}", file=sys.stderr)
    if args.verify:
        print(f"verification: {json.dumps({'verified': consumer.verified, 'mismatched': consumer.mismatched})}", file=sys.stderr)
        if consumer.mismatched:
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
