"""Keeps a SQLite table of the current objects of a cluster up to date as events arrive.

    python examples/sqlite_table.py --kafka kafka:9092 --topic deltaship.prod.core.configmaps --db objects.db
    python examples/sqlite_table.py --records ../../vectors/initial-and-live/kafka.jsonl --db objects.db

Table ``objects(resource, key, object)``: one row per object, its JSON as shipped. With
``--kafka`` it follows the topic (Ctrl-C stops it; ``--idle-exit N`` stops after N seconds
without a record); with ``--records`` it applies a recorded stream and stops.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time

from confluent_kafka import Consumer as KafkaConsumer

from deltaship_consumer import BadRecord, Consumer, Listener, read_records


class Table(Listener):
    """The listener: every change of the state is a row written or deleted."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        db.execute("CREATE TABLE IF NOT EXISTS objects (resource TEXT, key TEXT, object TEXT, PRIMARY KEY (resource, key))")

    def upsert(self, resource, key, obj):
        self.db.execute("INSERT OR REPLACE INTO objects VALUES (?, ?, ?)", (resource, key, json.dumps(obj, sort_keys=True)))
        self.db.commit()

    def delete(self, resource, key):
        self.db.execute("DELETE FROM objects WHERE resource = ? AND key = ?", (resource, key))
        self.db.commit()


def follow(brokers: str, topics: list[str], consumer: Consumer, idle_exit: float | None) -> None:
    """Reads the topics from the beginning and keeps reading."""
    kafka = KafkaConsumer({"bootstrap.servers": brokers, "group.id": f"deltaship-sqlite-{time.time_ns()}", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    kafka.subscribe(topics)
    last = time.monotonic()
    try:
        while idle_exit is None or time.monotonic() - last < idle_exit:
            m = kafka.poll(1.0)
            if m is None or m.error():
                continue
            last = time.monotonic()
            try:
                consumer.kafka_record(m.partition(), m.key(), m.headers() or [], m.value())
            except BadRecord as e:
                consumer.skip(f"{m.topic()}/{m.partition()}@{m.offset()}", e)
    finally:
        kafka.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kafka", metavar="BROKERS")
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--records", metavar="FILE")
    p.add_argument("--cluster")
    p.add_argument("--db", required=True)
    p.add_argument("--idle-exit", type=float, metavar="SECONDS")
    args = p.parse_args()
    consumer = Consumer(listener=Table(sqlite3.connect(args.db)), cluster=args.cluster)
    if args.records:
        read_records(args.records, consumer)
    else:
        follow(args.kafka, args.topic, consumer, args.idle_exit)


if __name__ == "__main__":
    main()
