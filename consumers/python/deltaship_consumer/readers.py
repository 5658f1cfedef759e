"""Readers of the real brokers: every record up to the end the source had when reading
started, then return (a rebuild). Each starts every partition at the consumer's position
(``Consumer.position``: restored from a snapshot, or where a previous read ended), from the
beginning when it has none, and advances it past every record (``Consumer.advance``): read
again to follow. For a consumer that keeps following, call the ``Consumer`` methods from
your own Kafka or NATS subscription instead. Each imports its
broker's client when called: the extras ``deltaship-consumer[kafka]`` (confluent-kafka) and
``deltaship-consumer[nats]`` (nats-py) install them."""

from __future__ import annotations

import time

from .decode import BadRecord
from .protocol import Consumer

TIMEOUT = 30.0
BATCH = 500


def read_kafka(brokers: str, topics: list[str], consumer: Consumer, config: dict | None = None) -> None:
    """Gives ``consumer`` every committed record of ``topics``, partition by partition, in
    offset order, up to the end each partition had when its reading started (its last stable
    offset: an open transaction holds it back); bad records are skipped, counted and reported
    (``Consumer.skip``). ``config``: more librdkafka settings (TLS, SASL).

    deltaship writes inside Kafka transactions when it fences a deposed leader: the records
    of an aborted transaction stay in the log, and transaction markers take offsets but are
    never delivered, so a partition ends at its EOF, not only at a record just before the end.
    """
    try:
        from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
        from confluent_kafka import Consumer as KafkaConsumer
    except ImportError as e:
        raise ImportError(f"read_kafka needs confluent-kafka ({e}); install it with: pip install 'deltaship-consumer[kafka]'") from None
    refused: list[str] = []
    theirs = (config or {}).get("error_cb")

    def on_error(error: KafkaError) -> None:
        # A refused credential or certificate: librdkafka would retry it until the timeout.
        if error.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL) or "SSL" in error.str():
            refused.append(error.str())
        if theirs:
            theirs(error)

    kafka = KafkaConsumer(
        {
            "bootstrap.servers": brokers,
            "group.id": "deltaship-consumer",
            "enable.auto.commit": False,
            # The broker holds a fetch at a partition's end this long (default 500 ms): each
            # partition's end would wait for it.
            "fetch.wait.max.ms": 100,
            **(config or {}),
            "error_cb": on_error,
            # librdkafka's default, made explicit, and not overridable: see above.
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        for topic in topics:
            metadata = None
            deadline = time.monotonic() + TIMEOUT
            while metadata is None:
                try:
                    metadata = kafka.list_topics(topic, timeout=1.0).topics.get(topic)
                except KafkaException as e:
                    kafka.poll(0.1)  # serves on_error
                    if refused:
                        raise RuntimeError(f"Kafka at {brokers} refused the connection: {refused[-1]}") from None
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"no answer from Kafka at {brokers} within {TIMEOUT} s: {e}") from None
            if metadata is None or metadata.error is not None or not metadata.partitions:
                raise RuntimeError(f"topic {topic} does not exist")
            for p in sorted(metadata.partitions):
                low, high = kafka.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)
                start = consumer.position(topic, p)
                if start is not None and start < low:
                    raise RuntimeError(
                        f"the position of {topic}/{p} is offset {start}, but the partition begins at {low}: "
                        "records were deleted (retention) before they were read; rebuild from a new snapshot"
                    )
                if high <= (low if start is None else start):
                    continue
                kafka.assign([TopicPartition(topic, p, OFFSET_BEGINNING if start is None else start)])
                while True:
                    m = kafka.poll(TIMEOUT)
                    if m is None:
                        raise RuntimeError(f"no record from {topic}/{p} within {TIMEOUT} s")
                    eof = m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF
                    if m.error() and not eof:
                        raise RuntimeError(f"reading {topic}/{p}: {m.error()}")
                    if (m.topic(), m.partition()) != (topic, p):
                        continue  # a partition read before: its EOF or records came late
                    if eof:
                        break
                    if m.offset() >= high:
                        break  # committed after reading started
                    try:
                        consumer.kafka_record(p, m.key(), m.headers() or [], m.value())
                    except BadRecord as e:
                        consumer.skip(f"{topic}/{p}@{m.offset()}", e)
                    consumer.advance(topic, p, m.offset() + 1)
                    if m.offset() + 1 >= high:
                        break
    finally:
        kafka.close()


async def read_jetstream(url: str, stream: str, consumer: Consumer) -> None:
    """Gives ``consumer`` every message of ``stream`` in stream order (from its position:
    partition 0), in batches through an ephemeral consumer; bad messages are skipped, counted
    and reported."""
    try:
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
    except ImportError as e:
        raise ImportError(f"read_jetstream needs nats-py ({e}); install it with: pip install 'deltaship-consumer[nats]'") from None

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        held = (await js.stream_info(stream)).state
        last = held.last_seq
        start = consumer.position(stream, 0)
        if start is not None and start < held.first_seq:
            raise RuntimeError(
                f"the position of stream {stream} is sequence {start}, but the stream begins at {held.first_seq}: "
                "messages were deleted (limits) before they were read; rebuild from a new snapshot"
            )
        if last == 0 or start is not None and start > last:
            return
        where = {"deliver_policy": DeliverPolicy.ALL} if start is None else {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": start}
        info = await js.add_consumer(stream, ConsumerConfig(ack_policy=AckPolicy.NONE, inactive_threshold=30.0, **where))
        sub = await js.pull_subscribe_bind(info.name, stream=stream)
        seq = 0 if start is None else start - 1
        while seq < last:
            for m in await sub.fetch(min(BATCH, last - seq), timeout=TIMEOUT):
                seq = m.metadata.sequence.stream
                try:
                    consumer.nats_message((m.headers or {}).items(), m.data)
                except BadRecord as e:
                    consumer.skip(f"{stream}#{seq}", e)
                consumer.advance(stream, 0, seq + 1)
                if seq >= last:
                    break
        await sub.unsubscribe()
    finally:
        await nc.close()
