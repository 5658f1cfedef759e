package dev.deltaship.consumer;

import dev.deltaship.consumer.jetstream.JetStreamReader;
import dev.deltaship.consumer.kafka.KafkaReader;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

/**
 * Rebuilds state into a map from a Kafka topic, a JetStream stream or a recorded stream, and
 * prints it as JSON: {@code {"<apiVersion>/<Kind>": {"<key>": object}}}. Records that cannot be
 * applied are skipped, each reported on stderr ({@code skipped record <where>: <reason>:
 * <problem>}), and counted by reason in a last stderr line. A {@code sync.completed} marker whose
 * count and digest do not match the state held is reported on stderr ({@code state mismatch at
 * marker ...}); with {@code --verify} a last line {@code verification: {"verified": N,
 * "mismatched": M}} follows and the exit code is 3 when M > 0. The {@code --tls*} and
 * {@code --sasl-*} flags secure the Kafka connection; the SASL password comes from a file. With
 * {@code --snapshot FILE} it resumes from the snapshot in FILE (when there is one) and saves it
 * there every {@code --save-every} records and at the end.
 *
 * <pre>java -jar deltaship-consumer-2.0.0-all.jar --kafka B --topic T | --nats URL --stream S | --records FILE [--cluster C] [--verify]
 *     [--snapshot FILE [--save-every N]] [--tls] [--tls-ca-file F] [--tls-cert-file F --tls-key-file F] [--sasl-mechanism M --sasl-username U --sasl-password-file F]</pre>
 */
public final class Rebuild {
    private Rebuild() {}

    public static void main(String[] args) throws Exception {
        String kafka = null, nats = null, stream = null, records = null, cluster = null, snapshot = null;
        int saveEvery = Consumer.DEFAULT_SAVE_EVERY;
        boolean verify = false;
        List<String> topics = new ArrayList<>();
        KafkaSecurity security = new KafkaSecurity();
        for (int i = 0; i < args.length; i++) {
            String value = i + 1 < args.length ? args[i + 1] : null;
            if (args[i].equals("--verify")) {
                verify = true;
                continue;
            }
            if (args[i].equals("--tls")) {
                security.tls = true;
                continue;
            }
            switch (args[i]) {
                case "--kafka" -> kafka = value;
                case "--topic" -> topics.add(value);
                case "--nats" -> nats = value;
                case "--stream" -> stream = value;
                case "--records" -> records = value;
                case "--cluster" -> cluster = value;
                case "--snapshot" -> snapshot = value;
                case "--save-every" -> saveEvery = Integer.parseInt(value);
                default -> {
                    if (!security.take(args[i], value)) {
                        usage("unknown argument " + args[i]);
                    }
                }
            }
            i++;
        }
        if (snapshot != null && records != null) {
            usage("--snapshot keeps positions in a topic or a stream: give it with --kafka or --nats");
        }
        Consumer consumer = new Consumer(null, cluster);
        try {
            if (snapshot != null) {
                consumer = Consumer.resume(Path.of(snapshot), null, cluster);
                consumer.saveEvery(saveEvery);
            }
            if (records != null) {
                Records.read(Path.of(records), consumer);
            } else if (kafka != null && !topics.isEmpty()) {
                Properties client;
                try {
                    client = security.properties();
                } catch (IllegalArgumentException e) {
                    usage(e.getMessage());
                    return;
                }
                KafkaReader.read(kafka, topics, consumer, client);
            } else if (nats != null && stream != null) {
                JetStreamReader.read(nats, stream, consumer);
            } else {
                usage("give --records FILE, --kafka BROKERS with --topic, or --nats URL with --stream");
            }
            if (snapshot != null) {
                consumer.save();
            }
        } catch (RuntimeException | java.io.IOException e) {
            System.err.println("error: " + causes(e));
            System.exit(1);
        }
        System.out.println(Json.MAPPER.writeValueAsString(consumer.state()));
        if (!consumer.skipped().isEmpty()) {
            long total = consumer.skipped().values().stream().mapToLong(Long::longValue).sum();
            System.err.println("skipped " + total + " records: " + Json.MAPPER.writeValueAsString(consumer.skipped()));
        }
        if (verify) {
            System.err.println("verification: {\"verified\": " + consumer.verified() + ", \"mismatched\": " + consumer.mismatched() + "}");
            if (consumer.mismatched() > 0) {
                System.exit(3);
            }
        }
    }

    /**
     * {@code e}'s message and those of its causes not already in it: the Kafka client's own
     * ("SSL handshake failed") names the cause only in a cause ("Received fatal alert: ...").
     */
    private static String causes(Throwable e) {
        StringBuilder said = new StringBuilder(String.valueOf(e.getMessage()));
        for (Throwable cause = e.getCause(); cause != null; cause = cause.getCause()) {
            if (cause.getMessage() != null && !said.toString().contains(cause.getMessage())) {
                said.append(": ").append(cause.getMessage());
            }
        }
        return said.toString();
    }

    private static void usage(String problem) {
        System.err.println("error: " + problem);
        System.exit(2);
    }
}
