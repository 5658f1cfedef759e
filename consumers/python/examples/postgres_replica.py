#!/usr/bin/env python3
"""Keeps a PostgreSQL copy of a cluster's objects from deltaship's Kafka topics, exact
through crashes of the bridge and of this replica.

    postgres_replica.py --kafka kafka:9092 --topic deltaship.prod.core.configmaps \\
        --dsn postgresql://replica@db/analytics [--cluster prod]

Tables (created when missing): ``objects`` (the current objects), ``history`` (every change
applied to ``objects``), ``positions`` (per topic and partition, the next offset to apply) and
``checks`` (each marker's count and digest compared with the objects held). Each batch of
records is applied, and its positions stored, in one transaction: a replica stopped at any
moment, even by SIGKILL, starts again at the first record it had not committed.

The consumer library keeps the protocol's memory (repeats seen, open syncs, which partition
holds which object) in memory only. At start the replica rebuilds it by reading each
partition from its beginning up to the stored position without writing, then applies what
follows. SIGTERM or Ctrl-C stops it after the batch in hand.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition
from confluent_kafka import Consumer as KafkaConsumer
from psycopg.types.json import Jsonb

from deltaship_consumer import BadRecord, Check, Consumer, Listener

# The tables, created when missing: the Go replica's DDL (postgres_replica.sql beside this
# script is a link to consumers/go/examples/postgres-replica/schema.sql).
SCHEMA = (Path(__file__).parent / "postgres_replica.sql").read_text()

BATCH = 500
TIMEOUT = 30.0
# The advisory lock a replica holds on its database while it runs (any fixed number).
LOCK = 0x64656C7461


class Replica(Listener):
    """The listener: while ``writing``, each change of the state is a row of ``objects`` and
    one of ``history``, in the transaction of the batch, at the record in hand (``at``)."""

    def __init__(self, db: psycopg.Connection) -> None:
        self.db = db
        self.writing = False
        self.at: tuple[str, int, int] = ("", 0, 0)

    def upsert(self, resource: str, key: str, obj: Any) -> None:
        if not self.writing:
            return
        # A reference payload (`payload = "reference"`) has uid and resourceVersion at its top.
        meta = obj.get("metadata", obj) if isinstance(obj, dict) else {}
        uid, rv = str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
        self.db.execute(
            "INSERT INTO objects (resource, key, uid, resource_version, object) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (resource, key) DO UPDATE SET uid = excluded.uid, resource_version = excluded.resource_version, object = excluded.object",
            (resource, key, uid, rv, Jsonb(obj)),
        )
        self.db.execute(
            "INSERT INTO history (topic, partition, kafka_offset, resource, key, change, uid, resource_version, object) VALUES (%s, %s, %s, %s, %s, 'upsert', %s, %s, %s)",
            (*self.at, resource, key, uid, rv, Jsonb(obj)),
        )

    def delete(self, resource: str, key: str) -> None:
        if not self.writing:
            return
        gone = self.db.execute("DELETE FROM objects WHERE resource = %s AND key = %s RETURNING uid, resource_version", (resource, key)).fetchone()
        self.db.execute(
            "INSERT INTO history (topic, partition, kafka_offset, resource, key, change, uid, resource_version) VALUES (%s, %s, %s, %s, %s, 'delete', %s, %s)",
            (*self.at, resource, key, *(gone or (None, None))),
        )

    def check(self, c: Check) -> None:
        if not self.writing:
            return
        self.db.execute(
            "INSERT INTO checks (topic, partition, kafka_offset, sync_id, cluster, resource, namespace, expected_count, held_count, expected_digest, held_digest, ok) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (*self.at, c.sync_id, c.cluster, c.resource, c.namespace, c.expected_count, c.held_count, c.expected_digest, c.held_digest, c.ok),
        )


def partitions(kafka: KafkaConsumer, topics: list[str]) -> list[tuple[str, int]]:
    """Every partition of ``topics``, waiting for topics the bridge has not created yet."""
    out: list[tuple[str, int]] = []
    for topic in topics:
        told = False
        while True:
            metadata = kafka.list_topics(topic, timeout=TIMEOUT).topics.get(topic)
            if metadata is not None and metadata.error is None and metadata.partitions:
                out.extend((topic, p) for p in sorted(metadata.partitions))
                break
            if not told:
                print(f"waiting for topic {topic} to exist", file=sys.stderr)
                told = True
            time.sleep(1.0)
    return out


def run(args: argparse.Namespace) -> int:
    db = psycopg.connect(args.dsn)
    # One replica per database: a second would apply the same records again. The lock is
    # the session's, so a killed replica's goes with its connection.
    if not db.execute("SELECT pg_try_advisory_lock(%s)", (LOCK,)).fetchone()[0]:
        print("another replica holds this database; waiting for it to stop", file=sys.stderr)
        db.execute("SELECT pg_advisory_lock(%s)", (LOCK,))
    db.execute(SCHEMA)
    stored = {(t, p): n for t, p, n in db.execute("SELECT topic, partition, next_offset FROM positions WHERE topic = ANY(%s)", (args.topic,))}
    db.commit()
    replica = Replica(db)
    consumer = Consumer(listener=replica, cluster=args.cluster, on_check=replica.check)
    kafka = KafkaConsumer(
        {
            # Positions live in PostgreSQL: the group commits nothing and never decides where to read.
            "bootstrap.servers": args.kafka,
            "group.id": "deltaship-postgres-replica",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.wait.max.ms": 100,
            # Committed records only: a fencing leader's aborted transactions stay in the log.
            "isolation.level": "read_committed",
        }
    )
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))
    started, replaying = time.monotonic(), sum(stored.values()) > 0
    applied = replayed = 0
    try:
        owned = partitions(kafka, args.topic)
        # From the beginning: the records before a stored position rebuild the protocol's memory.
        kafka.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in owned])
        while not stop:
            records = kafka.consume(BATCH, 1.0)
            moved: dict[tuple[str, int], int] = {}
            for m in records:
                if m.error() is not None:
                    raise RuntimeError(f"reading {m.topic()}/{m.partition()}: {m.error()}")
                tp = (m.topic(), m.partition())
                replica.writing = m.offset() >= stored.get(tp, 0)
                replica.at = (tp[0], tp[1], m.offset())
                try:
                    consumer.kafka_record(tp[1], m.key(), m.headers() or [], m.value())
                except BadRecord as e:
                    consumer.skip(f"{tp[0]}/{tp[1]}@{m.offset()}", e)
                if replica.writing:
                    moved[tp] = m.offset() + 1
                    applied += 1
                else:
                    replayed += 1
            for (t, p), n in moved.items():
                db.execute(
                    "INSERT INTO positions (topic, partition, next_offset) VALUES (%s, %s, %s) ON CONFLICT (topic, partition) DO UPDATE SET next_offset = excluded.next_offset",
                    (t, p, n),
                )
            db.commit()
            stored.update(moved)
            if replaying and all(kafka.position([TopicPartition(t, p)])[0].offset >= n for (t, p), n in stored.items() if n > 0):
                replaying = False
                print(f"replayed {replayed} records up to the stored positions in {time.monotonic() - started:.1f} s", file=sys.stderr)
    finally:
        kafka.close()
        db.close()
    print(f"applied {applied} records; markers verified {consumer.verified}, mismatched {consumer.mismatched}", file=sys.stderr)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kafka", metavar="BROKERS", required=True, help="Kafka bootstrap servers")
    p.add_argument("--topic", action="append", required=True, help="a topic deltaship writes (repeat for several)")
    p.add_argument("--dsn", required=True, help="the PostgreSQL connection (libpq URL or key=value string)")
    p.add_argument("--cluster", help="apply only this cluster's events")
    args = p.parse_args()
    try:
        return run(args)
    except psycopg.Error as e:
        # Not the DSN: it may hold a password.
        print(f"error: PostgreSQL: {e}", file=sys.stderr)
    except (KafkaException, RuntimeError) as e:
        print(f"error: Kafka ({args.kafka}): {e}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
