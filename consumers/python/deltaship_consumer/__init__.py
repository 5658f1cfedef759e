"""Rebuild Kubernetes state from deltaship's CloudEvents streams.

The consumer protocol of deltaship's event contract (vectors/README.md in the repository),
run per Kafka partition or over a JetStream stream, with a callback API::

    from deltaship_consumer import Consumer, Listener

    class Table(Listener):
        def upsert(self, resource, key, obj): ...
        def delete(self, resource, key): ...

    consumer = Consumer(listener=Table(), cluster="prod")
    consumer.kafka_record(partition, key, headers, value)   # or nats_message(...)
"""

from .decode import BadRecord, kafka_event, nats_event
from .protocol import Consumer, Listener
from .readers import read_jetstream, read_kafka

__all__ = ["BadRecord", "Consumer", "Listener", "kafka_event", "nats_event", "read_jetstream", "read_kafka"]
