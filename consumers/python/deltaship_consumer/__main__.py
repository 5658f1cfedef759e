"""``python -m deltaship_consumer``: rebuild state from a topic, a stream or a recorded
stream (a test vector's kafka.jsonl or nats.jsonl) and print it as JSON:
``{"<apiVersion>/<Kind>": {"<key>": object}}``. Records that cannot be applied are skipped,
each reported on stderr (``skipped record <where>: <reason>: <problem>``), and counted by
reason in a last stderr line. A ``sync.completed`` marker whose count and digest do not match
the state held is reported on stderr (``state mismatch at marker ...``); with ``--verify`` a
last line ``verification: {"verified": N, "mismatched": M}`` follows and the exit code is 3
when M > 0. The ``--tls*`` and ``--sasl-*`` options secure the Kafka connection; the SASL
password comes from a file."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from .protocol import DEFAULT_SAVE_EVERY, Consumer
from .records import read_records


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="deltaship-rebuild", description=__doc__)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--kafka", metavar="BROKERS", help="Kafka bootstrap servers; read every --topic")
    source.add_argument("--nats", metavar="URL", help="NATS server URL; read the --stream")
    source.add_argument("--records", metavar="FILE", help="a recorded stream (vectors/*/kafka.jsonl or nats.jsonl)")
    p.add_argument("--topic", action="append", default=[], help="a Kafka topic (repeat for several)")
    p.add_argument("--stream", help="the JetStream stream")
    p.add_argument("--cluster", help="apply only this cluster's events")
    p.add_argument("--snapshot", metavar="FILE", help="resume from this snapshot file (when it exists) and save to it as records are read and at the end")
    p.add_argument("--save-every", metavar="N", type=int, default=DEFAULT_SAVE_EVERY, help="records between two saves of --snapshot")
    p.add_argument("--verify", action="store_true", help="exit 3 when a marker's count and digest did not match the state held")
    tls = p.add_argument_group("Kafka TLS and SASL")
    tls.add_argument("--tls", action="store_true", help="connect over TLS (on too with any --tls-* file; the system's CAs without --tls-ca-file)")
    tls.add_argument("--tls-ca-file", metavar="FILE", help="PEM CA certificate(s) to verify the brokers with")
    tls.add_argument("--tls-cert-file", metavar="FILE", help="PEM client certificate, with --tls-key-file, for brokers that require one")
    tls.add_argument("--tls-key-file", metavar="FILE", help="PEM private key of --tls-cert-file (unencrypted)")
    tls.add_argument("--sasl-mechanism", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], help="SASL mechanism to authenticate with")
    tls.add_argument("--sasl-username", metavar="USER", help="the SASL user")
    tls.add_argument("--sasl-password-file", metavar="FILE", help="file holding the SASL password (a trailing newline is ignored)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.snapshot and args.records:
        p.error("--snapshot keeps positions in a topic or a stream: give it with --kafka or --nats")
    try:
        if args.snapshot:
            consumer = Consumer.resume(args.snapshot, cluster=args.cluster, save_every=args.save_every)
        else:
            consumer = Consumer(cluster=args.cluster)
        if args.records:
            read_records(args.records, consumer)
        elif args.kafka:
            from .readers import read_kafka

            if not args.topic:
                p.error("--kafka needs --topic")
            read_kafka(args.kafka, args.topic, consumer, kafka_security(args, p))
        else:
            from .readers import read_jetstream

            if not args.stream:
                p.error("--nats needs --stream")
            asyncio.run(read_jetstream(args.nats, args.stream, consumer))
        if args.snapshot:
            consumer.save()
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


def kafka_security(args: argparse.Namespace, p: argparse.ArgumentParser) -> dict[str, str]:
    """librdkafka's settings for the TLS and SASL options, as the product's ``sink.tls`` and
    ``sink.sasl`` map them: both give SASL_SSL, TLS alone SSL (with a client certificate:
    mutual TLS), SASL alone SASL_PLAINTEXT. The password is read from a file, never given
    on the command line, where other users of the host see it."""
    config: dict[str, str] = {}
    secure = args.tls or any([args.tls_ca_file, args.tls_cert_file, args.tls_key_file])
    sasl = [args.sasl_mechanism, args.sasl_username, args.sasl_password_file]
    if secure or any(sasl):
        config["security.protocol"] = ("SASL_" if any(sasl) else "") + ("SSL" if secure else "PLAINTEXT")
    if args.tls_ca_file:
        config["ssl.ca.location"] = args.tls_ca_file
    if bool(args.tls_cert_file) != bool(args.tls_key_file):
        p.error("--tls-cert-file and --tls-key-file go together")
    if args.tls_cert_file:
        config["ssl.certificate.location"] = args.tls_cert_file
        config["ssl.key.location"] = args.tls_key_file
    if any(sasl):
        if not all(sasl):
            p.error("SASL needs --sasl-mechanism, --sasl-username and --sasl-password-file together")
        try:
            with open(args.sasl_password_file, encoding="utf-8") as f:
                password = f.read().rstrip("\r\n")
        except OSError as e:
            p.error(f"--sasl-password-file: {e}")
        config.update({"sasl.mechanism": args.sasl_mechanism, "sasl.username": args.sasl_username, "sasl.password": password})
    return config


if __name__ == "__main__":
    sys.exit(main())
