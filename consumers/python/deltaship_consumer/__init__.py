"""Rebuild Kubernetes state from deltaship's CloudEvents streams.

The consumer protocol of deltaship's event contract (vectors/README.md in the repository),
run per Kafka partition or over a JetStream stream, with a callback API::

    from deltaship_consumer import Consumer, Listener

    class Table(Listener):
        def upsert(self, resource, key, obj): ...
        def delete(self, resource, key): ...

    consumer = Consumer(listener=Table(), cluster="prod")
    consumer.kafka_record(partition, key, headers, value)   # or nats_message(...)

A record that cannot be applied raises BadRecord (``reason``: one of vectors/README.md's)
and leaves the state as it was; ``consumer.skip(where, bad)`` counts and reports it.
``sync.completed`` markers carrying a count and digest are checked: ``consumer.verified``,
``consumer.mismatched``, and ``Consumer(on_check=...)`` called with each ``Check``.
"""

CONTRACT_VERSION = 2
"""The version of deltaship's event contract this library follows."""

from .decode import BadRecord, decode
from .jsontext import MAX_DEPTH, MAX_RECORD_BYTES, MAX_VALUES
from .protocol import Check, Consumer, Listener

__all__ = ["CONTRACT_VERSION", "BadRecord", "Check", "Consumer", "Listener", "MAX_DEPTH", "MAX_RECORD_BYTES", "MAX_VALUES", "decode", "read_jetstream", "read_kafka"]


def __getattr__(name):
    # The readers import the broker clients: only when asked for.
    if name in ("read_jetstream", "read_kafka"):
        from . import readers

        return getattr(readers, name)
    raise AttributeError(name)
