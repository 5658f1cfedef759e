package dev.deltaship.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * The count-and-digest vectors of the repository (vectors/state-digest/): every marker checked, the
 * clean streams verified without a mismatch, the tampered ones flagged at exactly their expected
 * markers.
 */
class StateDigestTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Path VECTORS = Path.of("../../vectors/state-digest");

    private static List<Path> cases() throws IOException {
        try (Stream<Path> dirs = Files.list(VECTORS)) {
            return dirs.filter(d -> Files.isRegularFile(d.resolve("expected.json"))).sorted().toList();
        }
    }

    private static Path stream(Path dir) {
        Path kafka = dir.resolve("kafka.jsonl");
        return Files.isRegularFile(kafka) ? kafka : dir.resolve("nats.jsonl");
    }

    @Test
    void thereAreCleanAndTamperedVectors() throws IOException {
        long flagged = 0;
        for (Path dir : cases()) {
            flagged += JSON.readTree(dir.resolve("expected.json").toFile()).at("/verification/c1/mismatched").asLong() > 0 ? 1 : 0;
        }
        assertTrue(cases().size() >= 7 && flagged >= 5, "state-digest vectors: " + cases());
    }

    @Test
    void anObjectsTermIsTheFirstHalfOfTheSha256OfKeyUidAndResourceVersion() {
        // printf 'ns/a\nu1\n7' | sha256sum
        assertEquals(new BigInteger("9003c859063459a282b3019b4296357b", 16), Consumer.term("ns/a", "u1", "7"));
    }

    @TestFactory
    List<DynamicTest> everyMarkerIsCheckedAndExactlyTheTamperedOnesFlagged() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        for (Path dir : cases()) {
            tests.add(DynamicTest.dynamicTest(dir.getFileName().toString(), () -> {
                JsonNode expected = JSON.readTree(dir.resolve("expected.json").toFile());
                for (Iterator<Map.Entry<String, JsonNode>> it = expected.get("clusters").fields(); it.hasNext(); ) {
                    Map.Entry<String, JsonNode> c = it.next();
                    Consumer consumer = new Consumer(null, c.getKey());
                    ByteArrayOutputStream report = new ByteArrayOutputStream();
                    consumer.reportTo(new PrintStream(report, true, StandardCharsets.UTF_8));
                    List<Consumer.Check> checks = new ArrayList<>();
                    consumer.onCheck(checks::add);
                    Records.read(stream(dir), consumer);
                    assertEquals(c.getValue(), Json.MAPPER.valueToTree(consumer.state()), dir + ", cluster " + c.getKey());
                    Map<String, Long> skipped = new TreeMap<>();
                    expected.get("skipped").get(c.getKey()).fields().forEachRemaining(e -> skipped.put(e.getKey(), e.getValue().asLong()));
                    Map<String, Long> mismatchedReasons = new TreeMap<>(consumer.skipped());
                    assertEquals(skipped, mismatchedReasons, dir + ", cluster " + c.getKey());
                    JsonNode want = expected.get("verification").get(c.getKey());
                    assertEquals(want.get("verified").asLong(), consumer.verified(), dir + ", cluster " + c.getKey());
                    assertEquals(want.get("mismatched").asLong(), consumer.mismatched(), dir + ", cluster " + c.getKey());
                    assertEquals(consumer.verified() + consumer.mismatched(), checks.size());
                    List<String> bad = new ArrayList<>();
                    for (Consumer.Check k : checks) {
                        if (!k.ok()) {
                            bad.add(k.syncId() + "/" + k.partition() + " " + Long.toUnsignedString(k.expectedCount()) + " " + k.expectedDigest() + " "
                                    + k.heldCount() + " " + k.heldDigest());
                        }
                    }
                    List<String> wantBad = new ArrayList<>();
                    for (JsonNode m : want.get("mismatches")) {
                        wantBad.add(m.get("syncId").asText() + "/" + m.get("partition").asInt() + " " + m.at("/expected/count").bigIntegerValue() + " "
                                + m.at("/expected/digest").asText() + " " + m.at("/held/count").asLong() + " " + m.at("/held/digest").asText());
                    }
                    assertEquals(wantBad, bad, dir + ", cluster " + c.getKey());
                    String said = report.toString(StandardCharsets.UTF_8);
                    assertEquals(bad.size(), said.lines().filter(l -> l.startsWith("state mismatch at marker ")).count(), said);
                }
            }));
        }
        return tests;
    }
}
