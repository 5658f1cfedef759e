package dev.deltaship.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A consumer saved to a snapshot in the middle of a stream and resumed from it ends exactly as one
 * that read the stream without stopping: same state, same protocol memory, same counts.
 */
class SnapshotTest {
    @TempDir
    Path dir;

    private static List<JsonNode> records(String vector) throws IOException {
        List<JsonNode> out = new ArrayList<>();
        for (String line : Files.readAllLines(Path.of("../../vectors", vector, "kafka.jsonl"))) {
            if (!line.isBlank()) {
                out.add(Json.MAPPER.readTree(line));
            }
        }
        return out;
    }

    private static void feed(Consumer c, List<JsonNode> rs) {
        for (JsonNode r : rs) {
            List<Map.Entry<String, byte[]>> headers = new ArrayList<>();
            for (JsonNode h : r.get("headers")) {
                headers.add(new AbstractMap.SimpleEntry<>(h.get(0).asText(), h.get(1).asText().getBytes(StandardCharsets.UTF_8)));
            }
            byte[] value = r.get("value").isNull() ? null : r.get("value").asText().getBytes(StandardCharsets.UTF_8);
            try {
                c.kafkaRecord(r.get("partition").asInt(), headers, value);
            } catch (BadRecordException e) {
                c.skip("", e);
            }
            c.advance(r.get("topic").asText(), r.get("partition").asInt(), r.get("offset").asLong() + 1);
        }
    }

    /** {@code c}'s snapshot document with its lists in one order. */
    private static String normal(Consumer c) {
        ObjectNode doc = Snapshot.of(c);
        for (String list : List.of("objects", "stale", "syncs", "markers")) {
            List<JsonNode> items = new ArrayList<>();
            doc.get(list).forEach(items::add);
            items.sort(Comparator.comparing(JsonNode::toString));
            ArrayNode sorted = doc.putArray(list);
            items.forEach(sorted::add);
        }
        return doc.toString();
    }

    @Test
    void aConsumerResumedFromASnapshotEndsAsOneThatNeverStopped() throws IOException {
        for (String vector : List.of("initial-and-live", "duplicates", "patch", "relist-diff", "restart", "resync")) {
            List<JsonNode> rs = records(vector);
            Consumer straight = new Consumer(null, "vectors");
            straight.reportTo(null);
            feed(straight, rs);
            for (int cut : new int[] {1, rs.size() / 3, rs.size() / 2, rs.size() - 1}) {
                Path file = dir.resolve(vector + "-" + cut + ".json");
                Consumer first = Consumer.resume(file, null, "vectors");
                first.reportTo(null);
                feed(first, rs.subList(0, cut));
                first.save();
                Consumer resumed = Consumer.resume(file, null, "vectors");
                resumed.reportTo(null);
                JsonNode last = rs.get(cut - 1);
                assertEquals(last.get("offset").asLong() + 1, resumed.position(last.get("topic").asText(), last.get("partition").asInt()).getAsLong());
                feed(resumed, rs.subList(cut, rs.size()));
                assertEquals(normal(straight), normal(resumed), vector + ", cut at " + cut);
            }
        }
    }

    @Test
    void aSnapshotSavesItselfEverySaveEveryRecordsAndResumesWithItsClusterOnly() throws IOException {
        Path file = dir.resolve("s.json");
        Consumer c = Consumer.resume(file, null, "vectors");
        c.reportTo(null);
        c.saveEvery(2);
        feed(c, records("initial-and-live").subList(0, 3));
        try (Stream<Path> files = Files.list(dir)) {
            assertEquals(List.of(file), files.toList(), "the snapshot alone, no temporary file");
        }
        IllegalArgumentException other = assertThrows(IllegalArgumentException.class, () -> Consumer.resume(file, null, "other"));
        assertTrue(other.getMessage().contains("taken with cluster vectors"), other.getMessage());
        Files.writeString(file, "{}");
        IllegalArgumentException empty = assertThrows(IllegalArgumentException.class, () -> Consumer.resume(file, null, "vectors"));
        assertTrue(empty.getMessage().contains("not a snapshot"), empty.getMessage());
        assertTrue(Consumer.resume(dir.resolve("none.json"), null, null).state().isEmpty());
    }
}
