"""Rebuild Kubernetes state from deltaship's CloudEvents streams.

The consumer protocol of deltaship's event contract (vectors/README.md in the repository),
run per Kafka partition or over a JetStream stream, with a callback API::

    from deltaship_consumer import Consumer, Listener

    class Table(Listener):
        def upsert(self, resource, key, obj): ...
        def delete(self, resource, key): ...

    consumer = Consumer(listener=Table(), cluster="prod")
    consumer.kafka_record(partition, key, headers, value)   # or nats_message(...)

``read_records(path, consumer)`` gives it a recorded stream (a test vector's kafka.jsonl or
nats.jsonl); ``read_kafka`` and ``read_jetstream`` read a topic or a stream to its end and
need the extras ``kafka`` (confluent-kafka) and ``nats`` (nats-py).

A record that cannot be applied raises BadRecord (``reason``: one of vectors/README.md's)
and leaves the state as it was; ``consumer.skip(where, bad)`` counts and reports it.
``Consumer.resume(path)`` starts from the snapshot file at ``path`` (or anew), the readers
start each partition at its saved position, and ``consumer.save()`` writes the state, the
protocol's memory and the positions to it atomically (``advance`` saves every
``save_every`` records)::

    consumer = Consumer.resume("prod.snapshot", listener=Table(), cluster="prod")
    read_kafka("kafka:9092", ["deltaship.prod.core.configmaps"], consumer)
    consumer.save()

``sync.completed`` markers carrying a count and digest are checked: ``consumer.verified``,
``consumer.mismatched``, and ``Consumer(on_check=...)`` called with each ``Check``.
"""

CONTRACT_VERSION = 2
"""The version of deltaship's event contract this library follows."""

from .decode import BadRecord, decode
from .jsontext import MAX_DEPTH, MAX_RECORD_BYTES, MAX_VALUES
from .protocol import DEFAULT_SAVE_EVERY, Check, Consumer, Listener
from .readers import read_jetstream, read_kafka
from .records import read_records
from .repeats import DEFAULT_REPEAT_WINDOW
from .snapshot import SNAPSHOT_FORMAT

__all__ = [
    "CONTRACT_VERSION",
    "DEFAULT_REPEAT_WINDOW",
    "DEFAULT_SAVE_EVERY",
    "BadRecord",
    "Check",
    "Consumer",
    "Listener",
    "MAX_DEPTH",
    "MAX_RECORD_BYTES",
    "MAX_VALUES",
    "SNAPSHOT_FORMAT",
    "decode",
    "read_jetstream",
    "read_kafka",
    "read_records",
]
