package dev.deltaship.consumer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.flipkart.zjsonpatch.JsonPatch;
import io.cloudevents.CloudEvent;
import io.cloudevents.core.builder.CloudEventBuilder;
import io.cloudevents.core.message.MessageReader;
import io.cloudevents.kafka.KafkaMessageFactory;
import java.io.IOException;
import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.time.OffsetDateTime;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.common.header.Headers;

/**
 * The consumer protocol of deltaship's event contract (vectors/README.md in the repository),
 * run per Kafka partition or over a JetStream stream (partition 0), with a {@link Listener}.
 * Kafka records are decoded by the official CloudEvents Java SDK (cloudevents-kafka: binary
 * and structured); JetStream messages in binary mode (percent-encoded {@code ce-} headers) are
 * built into the SDK's event with its builder, structured ones read by its JSON format. Not
 * thread-safe.
 */
public final class Consumer {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String STARTED = "dev.deltaship.sync.started";
    private static final String COMPLETED = "dev.deltaship.sync.completed";
    private static final String DELETED = "dev.deltaship.object.deleted";

    private record Home(int partition, String cluster) {}

    private static final class OpenSync {
        final String cluster;
        final String resource;
        final String namespace;
        final Set<String> touched = new HashSet<>();

        OpenSync(String cluster, String resource, String namespace) {
            this.cluster = cluster;
            this.resource = resource;
            this.namespace = namespace;
        }
    }

    private final Listener listener;
    private final String cluster;
    private final Map<String, Map<String, JsonNode>> state = new TreeMap<>();
    private final Map<String, Home> homes = new HashMap<>();
    private final Map<String, OpenSync> open = new HashMap<>();
    private final Set<String> seen = new HashSet<>();
    private long duplicates;

    /**
     * @param listener told of each change (null: none)
     * @param cluster apply only this cluster's events (null: all)
     */
    public Consumer(Listener listener, String cluster) {
        this.listener = listener == null ? new Listener() {} : listener;
        this.cluster = cluster;
    }

    /** The state: resource ({@code <apiVersion>/<Kind>}) to key to object. */
    public Map<String, Map<String, JsonNode>> state() {
        return state;
    }

    /** Events skipped as repeats of an id already seen on their partition. */
    public long duplicates() {
        return duplicates;
    }

    /** Applies one Kafka record of {@code partition}; a null value (a tombstone) is ignored. */
    public void kafkaRecord(int partition, Headers headers, byte[] value) throws BadRecordException {
        if (value == null) {
            return;
        }
        CloudEvent event;
        try {
            MessageReader reader = KafkaMessageFactory.createReader(headers, value);
            event = reader.toEvent();
        } catch (RuntimeException e) {
            throw new BadRecordException("not a CloudEvent: " + e.getMessage(), e);
        }
        apply(event, partition);
    }

    /** Applies one JetStream message, its headers as (name, value) pairs. */
    public void natsMessage(List<Map.Entry<String, String>> headers, byte[] data) throws BadRecordException {
        Map<String, String> h = new HashMap<>();
        for (Map.Entry<String, String> e : headers) {
            h.put(e.getKey().toLowerCase(java.util.Locale.ROOT), e.getValue());
        }
        CloudEvent event;
        try {
            if (h.getOrDefault("content-type", "").startsWith("application/cloudevents+json")) {
                event = io.cloudevents.core.provider.EventFormatProvider.getInstance()
                        .resolveFormat("application/cloudevents+json")
                        .deserialize(data);
            } else {
                CloudEventBuilder b = CloudEventBuilder.v1();
                for (Map.Entry<String, String> e : h.entrySet()) {
                    if (!e.getKey().startsWith("ce-")) {
                        continue;
                    }
                    String name = e.getKey().substring(3);
                    String value = URLDecoder.decode(e.getValue().replace("+", "%2B"), StandardCharsets.UTF_8);
                    switch (name) {
                        case "specversion" -> { }
                        case "id" -> b.withId(value);
                        case "type" -> b.withType(value);
                        case "source" -> b.withSource(URI.create(value));
                        case "subject" -> b.withSubject(value);
                        case "datacontenttype" -> b.withDataContentType(value);
                        case "dataschema" -> b.withDataSchema(URI.create(value));
                        case "time" -> b.withTime(OffsetDateTime.parse(value));
                        default -> b.withExtension(name, value);
                    }
                }
                event = b.withData(data).build();
            }
        } catch (RuntimeException e) {
            throw new BadRecordException("not a CloudEvent: " + e.getMessage(), e);
        }
        apply(event, 0);
    }

    private static String ext(CloudEvent e, String name) {
        Object v = e.getExtension(name);
        return v == null ? "" : v.toString();
    }

    /** Applies one CloudEvent read from {@code partition}. */
    public void apply(CloudEvent e, int partition) throws BadRecordException {
        String type = e.getType();
        if (!type.startsWith("dev.deltaship.")) {
            return;
        }
        String eventCluster = ext(e, "cluster");
        if (cluster != null && !cluster.equals(eventCluster)) {
            return;
        }
        if (!seen.add(partition + "/" + e.getId())) {
            duplicates++;
            return;
        }
        byte[] data = e.getData() == null ? new byte[0] : e.getData().toBytes();
        if (type.equals(STARTED) || type.equals(COMPLETED)) {
            marker(type.equals(STARTED), data, eventCluster, partition);
            return;
        }
        String resource = ext(e, "apiversion") + "/" + ext(e, "kind");
        String key = e.getSubject();
        if (key == null || key.isEmpty()) {
            throw new BadRecordException(type + " " + e.getId() + " has no subject");
        }
        for (OpenSync s : open.values()) {
            if (s.resource.equals(resource) && s.cluster.equals(eventCluster)) {
                s.touched.add(key);
            }
        }
        if (type.equals(DELETED)) {
            remove(resource, key);
            return;
        }
        Map<String, JsonNode> objects = state.computeIfAbsent(resource, r -> new TreeMap<>());
        JsonNode object = parse(data);
        if ("application/json-patch+json".equals(e.getDataContentType())) {
            JsonNode stored = objects.get(key);
            if (stored == null) {
                throw new BadRecordException("a patch for " + resource + " " + key + ", never received");
            }
            try {
                object = JsonPatch.apply(object, stored);
            } catch (RuntimeException ex) {
                throw new BadRecordException("the patch for " + resource + " " + key + " does not apply: " + ex.getMessage(), ex);
            }
        }
        objects.put(key, object);
        homes.put(resource + "\u0000" + key, new Home(partition, eventCluster));
        listener.upsert(resource, key, object);
    }

    private static JsonNode parse(byte[] data) throws BadRecordException {
        try {
            return JSON.readTree(data);
        } catch (IOException ex) {
            throw new BadRecordException("the data is not JSON: " + ex.getMessage(), ex);
        }
    }

    private void marker(boolean isStart, byte[] raw, String eventCluster, int partition) throws BadRecordException {
        JsonNode m = parse(raw);
        String syncId = m.path("syncId").asText("");
        if (syncId.isEmpty()) {
            throw new BadRecordException("a marker without its data");
        }
        JsonNode r = m.path("resource");
        String group = r.path("group").asText("");
        String resource = (group.isEmpty() ? "" : group + "/") + r.path("version").asText() + "/" + r.path("kind").asText();
        String namespace = m.hasNonNull("namespace") ? m.get("namespace").asText() : null;
        String slot = partition + "/" + syncId;
        if (isStart) {
            if ("full".equals(m.path("mode").asText())) {
                open.put(slot, new OpenSync(eventCluster, resource, namespace));
            }
            return;
        }
        OpenSync s = open.remove(slot);
        if (s == null) {
            return;
        }
        Map<String, JsonNode> objects = state.get(s.resource);
        if (objects != null) {
            Home here = new Home(partition, s.cluster);
            for (Iterator<String> keys = new java.util.ArrayList<>(objects.keySet()).iterator(); keys.hasNext(); ) {
                String key = keys.next();
                boolean inScope = s.namespace == null || key.startsWith(s.namespace + "/");
                if (inScope && !s.touched.contains(key) && here.equals(homes.get(s.resource + "\u0000" + key))) {
                    remove(s.resource, key);
                }
            }
        }
        listener.synced(s.resource, s.namespace);
    }

    private void remove(String resource, String key) {
        Map<String, JsonNode> objects = state.get(resource);
        if (objects != null && objects.remove(key) != null) {
            homes.remove(resource + "\u0000" + key);
            listener.delete(resource, key);
            if (objects.isEmpty()) {
                state.remove(resource);
            }
        }
    }
}
