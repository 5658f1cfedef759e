package dev.deltaship.consumer.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Properties;
import org.junit.jupiter.api.Test;

/** The client settings a caller gives pass through, except the reader's own. */
class KafkaReaderTest {
    @Test
    void theCallersSettingsPassThroughButNotOverTheReadersOwn() {
        Properties client = new Properties();
        client.put("security.protocol", "SASL_SSL");
        client.put("sasl.mechanism", "SCRAM-SHA-512");
        client.put("fetch.max.wait.ms", "250");
        client.put("bootstrap.servers", "elsewhere:9092");
        client.put("isolation.level", "read_uncommitted");
        client.put("enable.auto.commit", "true");
        Properties p = KafkaReader.settings("kafka:9093", client);
        assertEquals("SASL_SSL", p.get("security.protocol"));
        assertEquals("SCRAM-SHA-512", p.get("sasl.mechanism"));
        assertEquals("250", p.get("fetch.max.wait.ms"));
        assertEquals("kafka:9093", p.get("bootstrap.servers"));
        assertEquals("read_committed", p.get("isolation.level"));
        assertEquals("false", p.get("enable.auto.commit"));
    }
}
