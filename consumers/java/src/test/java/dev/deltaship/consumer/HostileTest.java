package dev.deltaship.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.io.TempDir;

/** The hostile vectors of the repository (vectors/hostile/): each stream rebuilds to its state with exactly its records skipped. */
class HostileTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Path HOSTILE = Path.of("../../vectors/hostile");

    private static List<Path> cases() throws IOException {
        try (Stream<Path> dirs = Files.list(HOSTILE)) {
            return dirs.filter(d -> Files.isRegularFile(d.resolve("expected.json"))).sorted().toList();
        }
    }

    private static Path stream(Path dir) {
        Path kafka = dir.resolve("kafka.jsonl");
        return Files.isRegularFile(kafka) ? kafka : dir.resolve("nats.jsonl");
    }

    @Test
    void thereAreAtLeastThirtyHostileVectors() throws IOException {
        assertTrue(cases().size() >= 30, "hostile vectors: " + cases());
    }

    @TestFactory
    List<DynamicTest> everyHostileVectorRebuildsToItsStateSkippingWhatItExpects() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        for (Path dir : cases()) {
            tests.add(DynamicTest.dynamicTest(dir.getFileName().toString(), () -> {
                JsonNode expected = JSON.readTree(dir.resolve("expected.json").toFile());
                for (Iterator<Map.Entry<String, JsonNode>> it = expected.get("clusters").fields(); it.hasNext(); ) {
                    Map.Entry<String, JsonNode> c = it.next();
                    Consumer consumer = new Consumer(null, c.getKey());
                    consumer.reportTo(null);
                    assertTimeoutPreemptively(Duration.ofSeconds(30), () -> Records.read(stream(dir), consumer));
                    assertEquals(c.getValue(), Json.MAPPER.valueToTree(consumer.state()), dir + ", cluster " + c.getKey());
                    Map<String, Long> want = new TreeMap<>();
                    expected.get("skipped").get(c.getKey()).fields().forEachRemaining(e -> want.put(e.getKey(), e.getValue().asLong()));
                    assertEquals(want, consumer.skipped(), dir + ", cluster " + c.getKey());
                }
            }));
        }
        return tests;
    }

    /** A Kafka line of an added whose value is {@code size} bytes (vectors/README.md, "Hostile vectors"). */
    private static String bigRecord(String name, int size) throws IOException {
        String head = "{\"metadata\":{\"name\":\"" + name + "\",\"namespace\":\"ns\"},\"data\":{\"big\":\"\"}}";
        String value = head.substring(0, head.length() - 3) + "x".repeat(size - head.length()) + head.substring(head.length() - 3);
        List<List<String>> headers = List.of(List.of("ce_id", name), List.of("ce_type", "dev.deltaship.object.added"), List.of("ce_subject", "ns/" + name),
                List.of("ce_apiversion", "v1"), List.of("ce_kind", "ConfigMap"), List.of("ce_cluster", "c1"));
        Map<String, Object> line = new TreeMap<>(Map.of("topic", "big", "partition", 0, "offset", 0, "headers", headers, "value", value));
        return Json.MAPPER.writeValueAsString(line) + "\n";
    }

    @Test
    void aRecordOfTheSizeBoundIsAppliedAndALargerOneSkipped(@TempDir Path tmp) throws IOException {
        Path file = tmp.resolve("big.jsonl");
        Files.writeString(file, bigRecord("a", Json.MAX_RECORD_BYTES) + bigRecord("b", 20_000_001) + bigRecord("c", 100), StandardCharsets.UTF_8);
        Consumer consumer = new Consumer(null, "c1");
        consumer.reportTo(new PrintStream(PrintStream.nullOutputStream()));
        Records.read(file, consumer);
        Map<String, JsonNode> objects = consumer.state().get("v1/ConfigMap");
        assertEquals(List.of("ns/a", "ns/c"), new ArrayList<>(objects.keySet()));
        assertEquals(Json.MAX_RECORD_BYTES, Json.MAPPER.writeValueAsBytes(objects.get("ns/a")).length);
        assertEquals(Map.of("too_large", 1L), consumer.skipped());
    }
}
