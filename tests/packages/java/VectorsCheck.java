import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.deltaship.consumer.Consumer;
import dev.deltaship.consumer.Records;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;

/**
 * Rebuilds every shared test vector through the installed deltaship consumer library and prints
 * one JSON line: what was checked and what failed. {@code java -cp CLASSPATH VectorsCheck.java
 * VECTORS_DIR}
 */
public class VectorsCheck {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws IOException {
        Path vectors = Path.of(args[0]);
        List<Path> cases = new ArrayList<>();
        try (Stream<Path> found = Files.find(vectors, 3, (p, a) -> p.getFileName().toString().equals("expected.json"))) {
            found.map(Path::getParent).sorted().forEach(cases::add);
        }
        int checked = 0;
        List<String> failures = new ArrayList<>();
        for (Path dir : cases) {
            JsonNode expected = JSON.readTree(dir.resolve("expected.json").toFile());
            List<Path> streams = Stream.of("kafka.jsonl", "nats.jsonl").map(dir::resolve).filter(Files::isRegularFile).toList();
            for (Path stream : streams) {
                for (Iterator<Map.Entry<String, JsonNode>> it = expected.get("clusters").fields(); it.hasNext(); ) {
                    Map.Entry<String, JsonNode> c = it.next();
                    String what = vectors.relativize(stream) + ", cluster " + c.getKey();
                    Consumer consumer = new Consumer(null, c.getKey());
                    consumer.reportTo(null);
                    Records.read(stream, consumer);
                    if (!c.getValue().equals(JSON.valueToTree(consumer.state()))) {
                        failures.add(what + ": state");
                    }
                    Map<String, Long> skipped = new TreeMap<>();
                    expected.path("skipped").path(c.getKey()).fields().forEachRemaining(e -> skipped.put(e.getKey(), e.getValue().asLong()));
                    if (!skipped.equals(consumer.skipped())) {
                        failures.add(what + ": skipped " + consumer.skipped());
                    }
                    JsonNode v = expected.path("verification").path(c.getKey());
                    // The first stream's markers are the ones counted (each Kafka copy once).
                    boolean first = stream.equals(streams.get(0));
                    if (!v.isMissingNode() && (consumer.mismatched() != v.get("mismatched").asLong()
                            || (first ? consumer.verified() != v.get("verified").asLong() : consumer.verified() == 0))) {
                        failures.add(what + ": verified " + consumer.verified() + ", mismatched " + consumer.mismatched());
                    }
                    checked++;
                }
            }
        }
        System.out.println(JSON.writeValueAsString(Map.of("checked", checked, "failures", failures, "contract", Consumer.CONTRACT_VERSION)));
    }
}
