package dev.deltaship.consumer;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Recorded streams (the test vectors' format, vectors/README.md), given to a {@link Consumer}. */
public final class Records {
    private Records() {}

    /**
     * A recorded stream: Kafka records or JetStream messages as JSON lines (vectors/README.md),
     * lines of any length. Bad records are skipped, counted and reported ({@link Consumer#skip});
     * a line that is not a recorded record is an error of the file.
     */
    public static void read(Path file, Consumer consumer) throws IOException {
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
                        List<Map.Entry<String, byte[]>> headers = new ArrayList<>();
                        for (JsonNode h : r.get("headers")) {
                            headers.add(new AbstractMap.SimpleEntry<>(h.get(0).asText(), h.get(1).asText().getBytes(StandardCharsets.UTF_8)));
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
