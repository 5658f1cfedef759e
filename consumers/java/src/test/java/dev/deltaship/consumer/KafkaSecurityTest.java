package dev.deltaship.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Properties;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.common.security.JaasContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The command's TLS and SASL flags become the Kafka client's settings. */
class KafkaSecurityTest {
    @TempDir
    Path dir;

    private KafkaSecurity sasl(String mechanism, String password) throws Exception {
        KafkaSecurity s = new KafkaSecurity();
        s.mechanism = mechanism;
        s.username = "user";
        s.passwordFile = Files.writeString(dir.resolve("password"), password).toString();
        return s;
    }

    @Test
    void theProtocolFollowsFromTlsAndSasl() throws Exception {
        assertNull(new KafkaSecurity().properties().get("security.protocol"));
        KafkaSecurity tls = new KafkaSecurity();
        tls.tls = true;
        assertEquals("SSL", tls.properties().get("security.protocol"));
        KafkaSecurity both = sasl("PLAIN", "p");
        assertEquals("SASL_PLAINTEXT", both.properties().get("security.protocol"));
        both.caFile = "ca.pem";
        Properties p = both.properties();
        assertEquals("SASL_SSL", p.get("security.protocol"));
        assertEquals("PEM", p.get("ssl.truststore.type"));
        assertEquals("ca.pem", p.get("ssl.truststore.location"));
    }

    @Test
    void thePasswordFileReachesTheLoginModuleWhateverItHolds() throws Exception {
        String password = "a \"quoted\" \\ back;slashed password";
        Properties p = sasl("SCRAM-SHA-512", password + "\n").properties();
        assertEquals("SCRAM-SHA-512", p.get("sasl.mechanism"));
        // Parsed as the Kafka client parses it.
        JaasContext context = JaasContext.loadClientContext(Map.of("sasl.jaas.config", new Password((String) p.get("sasl.jaas.config"))));
        AppConfigurationEntry entry = context.configurationEntries().get(0);
        assertEquals("org.apache.kafka.common.security.scram.ScramLoginModule", entry.getLoginModuleName());
        assertEquals(Map.of("username", "user", "password", password), entry.getOptions());
    }

    @Test
    void flagsGivenWrongAreNamed() throws Exception {
        KafkaSecurity half = new KafkaSecurity();
        half.certFile = "client.pem";
        assertEquals("--tls-cert-file and --tls-key-file go together", assertThrows(IllegalArgumentException.class, half::properties).getMessage());
        KafkaSecurity unknown = sasl("SCRAM-SHA-1", "p");
        assertEquals("unknown SASL mechanism \"SCRAM-SHA-1\": give PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
                assertThrows(IllegalArgumentException.class, unknown::properties).getMessage());
        KafkaSecurity noUser = sasl("PLAIN", "p");
        noUser.username = null;
        assertEquals("SASL needs --sasl-mechanism, --sasl-username and --sasl-password-file together",
                assertThrows(IllegalArgumentException.class, noUser::properties).getMessage());
    }
}
