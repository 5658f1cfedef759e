package dev.deltaship.consumer;

import com.fasterxml.jackson.databind.JsonNode;
import io.nats.client.Connection;
import io.nats.client.JetStreamManagement;
import io.nats.client.Nats;
import io.nats.client.api.MessageInfo;
import io.nats.client.impl.Headers;
import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/** Sources read to the end they had when reading started: Kafka, JetStream, recorded streams. */
public final class Readers {
    private static final Duration TIMEOUT = Duration.ofSeconds(30);

    private Readers() {}

    /**
     * Every committed record of {@code topics}, partition by partition, in offset order, up to
     * the end each partition had when its reading started: its last stable offset (an open
     * transaction holds it back). deltaship writes inside Kafka transactions when it fences a
     * deposed leader: the records of an aborted transaction stay in the log, and the markers
     * that end transactions take offsets but are never delivered, so a partition ends where the
     * consumer's position reaches the end, not at a record just before it.
     */
    public static void kafka(String brokers, List<String> topics, Consumer consumer) {
        Properties p = new Properties();
        p.put("bootstrap.servers", brokers);
        p.put("enable.auto.commit", "false");
        // kafka-clients' default is read_uncommitted; under read_committed endOffsets is the
        // last stable offset.
        p.put("isolation.level", "read_committed");
        // The broker holds a fetch at a partition's end this long (default 500 ms), and reading
        // stops at every partition's end.
        p.put("fetch.max.wait.ms", "100");
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
                    kafka.seekToBeginning(List.of(tp));
                    long next = kafka.position(tp, TIMEOUT);
                    long deadline = System.nanoTime() + TIMEOUT.toNanos();
                    while (next < end) {
                        var records = kafka.poll(Duration.ofMillis(200));
                        for (ConsumerRecord<byte[], byte[]> r : records) {
                            if (r.offset() >= end) {
                                break; // committed after reading started
                            }
                            try {
                                consumer.kafkaRecord(r.partition(), r.headers(), r.value());
                            } catch (BadRecordException e) {
                                consumer.skip(r.topic() + "/" + r.partition() + "@" + r.offset(), e);
                            }
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

    /** Every message of {@code stream}, in stream order. */
    public static void jetStream(String url, String stream, Consumer consumer) throws IOException, InterruptedException {
        try (Connection nc = Nats.connect(url)) {
            JetStreamManagement jsm = nc.jetStreamManagement();
            var state = jsm.getStreamInfo(stream).getStreamState();
            for (long seq = Math.max(1, state.getFirstSequence()); seq <= state.getLastSequence(); seq++) {
                MessageInfo m;
                try {
                    m = jsm.getMessage(stream, seq);
                } catch (io.nats.client.JetStreamApiException e) {
                    consumer.skip(stream + "#" + seq, new BadRecordException("missing", "no message at this sequence: " + e.getMessage()));
                    continue;
                }
                try {
                    consumer.natsMessage(pairs(m.getHeaders()), m.getData());
                } catch (BadRecordException e) {
                    consumer.skip(stream + "#" + seq, e);
                }
            }
        } catch (io.nats.client.JetStreamApiException e) {
            throw new IllegalStateException("stream " + stream + ": " + e.getMessage(), e);
        }
    }

    private static List<Map.Entry<String, String>> pairs(Headers headers) {
        List<Map.Entry<String, String>> out = new ArrayList<>();
        if (headers != null) {
            for (String name : headers.keySet()) {
                for (String value : headers.get(name)) {
                    out.add(new AbstractMap.SimpleEntry<>(name, value));
                }
            }
        }
        return out;
    }

    /**
     * A recorded stream: Kafka records or JetStream messages as JSON lines (vectors/README.md),
     * lines of any length. Bad records are skipped, counted and reported ({@link Consumer#skip});
     * a line that is not a recorded record is an error of the file.
     */
    public static void records(Path file, Consumer consumer) throws IOException {
        try (BufferedReader lines = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            String line;
            for (int n = 1; (line = lines.readLine()) != null; n++) {
                if (line.isBlank()) {
                    continue;
                }
                JsonNode r;
                try {
                    r = Json.MAPPER.readTree(line);
                } catch (IOException e) {
                    throw new IllegalStateException(file + ":" + n + ": not a recorded Kafka record or JetStream message: " + e.getMessage(), e);
                }
                boolean kafka = r.path("topic").isTextual();
                if (!r.path("headers").isArray() || kafka == r.path("data").isTextual() || kafka && !(r.path("value").isTextual() || r.path("value").isNull())) {
                    throw new IllegalStateException(file + ":" + n + ": not a recorded Kafka record or JetStream message");
                }
                String where = kafka ? r.get("topic").asText() + "/" + r.path("partition").asInt() + "@" + r.path("offset").asLong()
                        : r.path("stream").asText() + "#" + r.path("sequence").asLong();
                try {
                    if (kafka) {
                        RecordHeaders headers = new RecordHeaders();
                        for (JsonNode h : r.get("headers")) {
                            headers.add(h.get(0).asText(), h.get(1).asText().getBytes(StandardCharsets.UTF_8));
                        }
                        byte[] value = r.get("value").isNull() ? null : r.get("value").asText().getBytes(StandardCharsets.UTF_8);
                        consumer.kafkaRecord(r.path("partition").asInt(), headers, value);
                    } else {
                        List<Map.Entry<String, String>> headers = new ArrayList<>();
                        for (JsonNode h : r.get("headers")) {
                            headers.add(new AbstractMap.SimpleEntry<>(h.get(0).asText(), h.get(1).asText()));
                        }
                        consumer.natsMessage(headers, r.get("data").asText().getBytes(StandardCharsets.UTF_8));
                    }
                } catch (BadRecordException e) {
                    consumer.skip(where, e);
                }
            }
        }
    }
}
