package dev.deltaship.consumer.kafka;

import dev.deltaship.consumer.BadRecordException;
import dev.deltaship.consumer.Consumer;
import java.time.Duration;
import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Reads deltaship's Kafka topics into a {@link Consumer} with the Apache Kafka client
 * ({@code org.apache.kafka:kafka-clients}, an optional dependency: declare it, at the version
 * you choose), to the end each partition had when reading started.
 */
public final class KafkaReader {
    private static final Duration TIMEOUT = Duration.ofSeconds(30);

    private KafkaReader() {}

    /**
     * Every committed record of {@code topics}, partition by partition, in offset order, up to
     * the end each partition had when its reading started: its last stable offset (an open
     * transaction holds it back). deltaship writes inside Kafka transactions when it fences a
     * deposed leader: the records of an aborted transaction stay in the log, and the markers
     * that end transactions take offsets but are never delivered, so a partition ends where the
     * consumer's position reaches the end, not at a record just before it. Each partition starts
     * at {@link Consumer#position} (restored by {@link Consumer#resume}, or where a previous read
     * ended; the beginning when there is none), and {@link Consumer#advance} moves it past every
     * record: read again to follow.
     */
    public static void read(String brokers, List<String> topics, Consumer consumer) {
        read(brokers, topics, consumer, new Properties());
    }

    /**
     * As {@link #read(String, List, Consumer)}, with more settings of the Kafka client: those
     * of its connection ({@code security.protocol}, {@code ssl.*}, {@code sasl.*}) and any
     * other consumer setting, passed through. The reader's own settings are not overridable:
     * {@code bootstrap.servers} is {@code brokers}, {@code isolation.level} is
     * {@code read_committed} and {@code enable.auto.commit} is {@code false}.
     */
    public static void read(String brokers, List<String> topics, Consumer consumer, Properties client) {
        Properties p = settings(brokers, client);
        try (KafkaConsumer<byte[], byte[]> kafka = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            for (String topic : topics) {
                List<PartitionInfo> partitions = kafka.partitionsFor(topic, TIMEOUT);
                if (partitions == null || partitions.isEmpty()) {
                    throw new IllegalStateException("topic " + topic + " does not exist");
                }
                for (PartitionInfo info : partitions) {
                    TopicPartition tp = new TopicPartition(topic, info.partition());
                    long end = kafka.endOffsets(List.of(tp), TIMEOUT).get(tp);
                    kafka.assign(List.of(tp));
                    OptionalLong start = consumer.position(topic, info.partition());
                    if (start.isPresent()) {
                        long low = kafka.beginningOffsets(List.of(tp), TIMEOUT).get(tp);
                        if (start.getAsLong() < low) {
                            throw new IllegalStateException("the position of " + topic + "/" + info.partition() + " is offset " + start.getAsLong() + ", but the partition begins at " + low
                                    + ": records were deleted (retention) before they were read; rebuild from a new snapshot");
                        }
                        kafka.seek(tp, start.getAsLong());
                    } else {
                        kafka.seekToBeginning(List.of(tp));
                    }
                    long next = kafka.position(tp, TIMEOUT);
                    long deadline = System.nanoTime() + TIMEOUT.toNanos();
                    while (next < end) {
                        var records = kafka.poll(Duration.ofMillis(200));
                        for (ConsumerRecord<byte[], byte[]> r : records) {
                            if (r.offset() >= end) {
                                break; // committed after reading started
                            }
                            try {
                                consumer.kafkaRecord(r.partition(), pairs(r.headers()), r.value());
                            } catch (BadRecordException e) {
                                consumer.skip(r.topic() + "/" + r.partition() + "@" + r.offset(), e);
                            }
                            consumer.advance(topic, r.partition(), r.offset() + 1);
                        }
                        // The position moves past markers and aborted records too, which no poll returns.
                        long position = kafka.position(tp, TIMEOUT);
                        if (position > next) {
                            next = position;
                            deadline = System.nanoTime() + TIMEOUT.toNanos();
                        } else if (System.nanoTime() > deadline) {
                            throw new IllegalStateException("no record from " + tp + " within " + TIMEOUT);
                        }
                    }
                }
            }
        }
    }

    /** The client's settings: {@code client}'s, then the reader's own over them. */
    static Properties settings(String brokers, Properties client) {
        Properties p = new Properties();
        // The broker holds a fetch at a partition's end this long (default 500 ms), and reading
        // stops at every partition's end.
        p.put("fetch.max.wait.ms", "100");
        p.putAll(client);
        p.put("bootstrap.servers", brokers);
        p.put("enable.auto.commit", "false");
        // kafka-clients' default is read_uncommitted; under read_committed endOffsets is the
        // last stable offset.
        p.put("isolation.level", "read_committed");
        return p;
    }

    private static List<Map.Entry<String, byte[]>> pairs(Headers headers) {
        List<Map.Entry<String, byte[]>> out = new ArrayList<>();
        for (Header h : headers) {
            out.add(new AbstractMap.SimpleEntry<>(h.key(), h.value()));
        }
        return out;
    }
}
