package dev.deltaship.consumer;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Properties;

/**
 * The Kafka client settings of the command's {@code --tls*} and {@code --sasl-*} flags, as the
 * product's {@code sink.tls} and {@code sink.sasl} map them: both give {@code SASL_SSL},
 * TLS alone {@code SSL} (with a client certificate: mutual TLS), SASL alone
 * {@code SASL_PLAINTEXT}. The SASL password is read from a file, never given on the command
 * line, where other users of the host see it.
 */
final class KafkaSecurity {
    private static final Map<String, String> LOGIN_MODULES = Map.of(
            "PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule",
            "SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule",
            "SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule");

    boolean tls;
    String caFile, certFile, keyFile, mechanism, username, passwordFile;

    /** Takes {@code flag} with its {@code value}; false when it is not one of these flags. */
    boolean take(String flag, String value) {
        switch (flag) {
            case "--tls-ca-file" -> caFile = value;
            case "--tls-cert-file" -> certFile = value;
            case "--tls-key-file" -> keyFile = value;
            case "--sasl-mechanism" -> mechanism = value;
            case "--sasl-username" -> username = value;
            case "--sasl-password-file" -> passwordFile = value;
            default -> {
                return false;
            }
        }
        return true;
    }

    /** The client settings; an {@link IllegalArgumentException} names a flag given wrong. */
    Properties properties() {
        Properties p = new Properties();
        boolean secure = tls || caFile != null || certFile != null || keyFile != null;
        boolean sasl = mechanism != null || username != null || passwordFile != null;
        if (secure || sasl) {
            p.put("security.protocol", (sasl ? "SASL_" : "") + (secure ? "SSL" : "PLAINTEXT"));
        }
        if (caFile != null) {
            p.put("ssl.truststore.type", "PEM");
            p.put("ssl.truststore.location", caFile);
        }
        if ((certFile == null) != (keyFile == null)) {
            throw new IllegalArgumentException("--tls-cert-file and --tls-key-file go together");
        }
        if (certFile != null) {
            p.put("ssl.keystore.type", "PEM");
            p.put("ssl.keystore.certificate.chain", read("--tls-cert-file", certFile));
            p.put("ssl.keystore.key", read("--tls-key-file", keyFile));
        }
        if (sasl) {
            if (mechanism == null || username == null || passwordFile == null) {
                throw new IllegalArgumentException("SASL needs --sasl-mechanism, --sasl-username and --sasl-password-file together");
            }
            String module = LOGIN_MODULES.get(mechanism);
            if (module == null) {
                throw new IllegalArgumentException("unknown SASL mechanism \"" + mechanism + "\": give PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512");
            }
            String password = read("--sasl-password-file", passwordFile).replaceAll("[\r\n]+$", "");
            p.put("sasl.mechanism", mechanism);
            p.put("sasl.jaas.config", module + " required username=" + quoted(username) + " password=" + quoted(password) + ";");
        }
        return p;
    }

    private static String read(String flag, String file) {
        try {
            return Files.readString(Path.of(file));
        } catch (IOException e) {
            throw new IllegalArgumentException(flag + " " + file + ": cannot read it (" + e + ")");
        }
    }

    /** A JAAS option value: in double quotes, its backslashes and quotes escaped. */
    private static String quoted(String value) {
        return "\"" + value.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}
