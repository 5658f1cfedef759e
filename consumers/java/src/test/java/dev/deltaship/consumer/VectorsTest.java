package dev.deltaship.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/** The shared test vectors of the repository: every recorded stream rebuilds to its expected state. */
class VectorsTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Path VECTORS = Path.of("../../vectors");

    @Test
    void everyVectorRebuildsToItsExpectedState() throws IOException {
        List<String> checked = new ArrayList<>();
        try (Stream<Path> dirs = Files.list(VECTORS)) {
            for (Path dir : (Iterable<Path>) dirs.sorted()::iterator) {
                Path expectedFile = dir.resolve("expected.json");
                if (!Files.isRegularFile(expectedFile)) {
                    continue;
                }
                JsonNode expected = JSON.readTree(expectedFile.toFile());
                JsonNode clusters = expected.get("clusters");
                for (String stream : List.of("kafka.jsonl", "nats.jsonl")) {
                    Path file = dir.resolve(stream);
                    if (!Files.isRegularFile(file)) {
                        continue;
                    }
                    for (Iterator<Map.Entry<String, JsonNode>> it = clusters.fields(); it.hasNext(); ) {
                        Map.Entry<String, JsonNode> c = it.next();
                        Consumer consumer = new Consumer(null, c.getKey());
                        Records.read(file, consumer);
                        assertEquals(c.getValue(), JSON.valueToTree(consumer.state()), file + ", cluster " + c.getKey());
                        assertEquals(Map.of(), consumer.skipped(), file + ": a record of a real run skipped");
                        assertEquals(0, consumer.mismatched(), file + ": a marker's count and digest did not match");
                        JsonNode verification = expected.path("verification").path(c.getKey());
                        // verification counts the Kafka copies (one per partition); a stream holds one of each.
                        if (!verification.isMissingNode() && stream.equals("kafka.jsonl")) {
                            assertEquals(verification.get("verified").asLong(), consumer.verified(), file + ", cluster " + c.getKey());
                        } else if (!verification.isMissingNode()) {
                            assertTrue(consumer.verified() > 0, file + ", cluster " + c.getKey() + ": no marker verified");
                        }
                    }
                    checked.add(dir.getFileName() + "/" + stream);
                }
            }
        }
        assertTrue(checked.size() >= 15, "recorded streams checked: " + checked);
    }

    @Test
    void theListenerHearsOfTheDeleteAFullSyncInfers() throws IOException {
        List<String> deletes = new ArrayList<>();
        Consumer consumer = new Consumer(new Listener() {
            @Override
            public void delete(String resource, String key) {
                deletes.add(key);
            }
        }, null);
        Records.read(VECTORS.resolve("restart/kafka.jsonl"), consumer);
        assertEquals(1, deletes.size(), deletes.toString());
    }
}
