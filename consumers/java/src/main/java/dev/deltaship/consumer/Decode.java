package dev.deltaship.consumer;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

/**
 * One Kafka record or JetStream message to a step of the consumer protocol, or the reason it
 * is bad, by the rules every consumer of the repository shares with {@code deltaship rebuild}
 * (vectors/README.md, "Decoding a record").
 */
final class Decode {
    private static final String PREFIX = "dev.deltaship.";
    private static final Map<String, String> CHANGES = Map.of(
            "object.added", "added", "object.updated", "updated", "object.synced", "synced", "object.deleted", "deleted");

    private Decode() {}

    record Marker(boolean started, String syncId, boolean full, String resource, String namespace) {}

    /** An object event: {@code whole} the object, or {@code ops} a patch's; neither for deleted. */
    record Object(String change, String resource, String key, JsonNode whole, List<JsonNode> ops) {}

    record Received(String id, String cluster, int partition, Marker marker, Object object) {}

    private interface Attribute {
        String get(String name) throws BadRecordException;
    }

    private interface Data {
        JsonNode get() throws BadRecordException;
    }

    /** The event of one record; null for a tombstone (a null value) or a foreign type. */
    static Received decode(boolean nats, List<Map.Entry<String, byte[]>> headers, byte[] value, int partition) throws BadRecordException {
        if (value == null) {
            return null;
        }
        if (value.length == 0) {
            throw new BadRecordException("empty", "the value is empty");
        }
        if (value.length > Json.MAX_RECORD_BYTES) {
            throw new BadRecordException("too_large", "the value is " + value.length + " bytes, more than " + Json.MAX_RECORD_BYTES);
        }
        Attribute header = name -> {
            byte[] raw = null;
            for (Map.Entry<String, byte[]> h : headers) {
                if (h.getValue() != null && asciiLower(h.getKey()).equals(name)) {
                    raw = h.getValue();
                }
            }
            if (raw == null) {
                return null;
            }
            try {
                return StandardCharsets.UTF_8.newDecoder().decode(ByteBuffer.wrap(nats ? percentDecode(raw) : raw)).toString();
            } catch (CharacterCodingException e) {
                throw new BadRecordException("wrong_type", "header " + name + " is not UTF-8");
            }
        };
        String contentType = header.get("content-type");
        if (contentType != null && contentType.startsWith("application/cloudevents+json")) {
            JsonNode event = Json.parse(value);
            if (!event.isObject()) {
                throw new BadRecordException("wrong_type", "the structured event is " + kind(event) + ", not a JSON object");
            }
            Attribute text = name -> {
                JsonNode v = event.get(name);
                if (v == null || v.isNull()) {
                    return null;
                }
                if (!v.isTextual()) {
                    throw new BadRecordException("wrong_type", "attribute " + name + " is " + kind(v) + ", not a string");
                }
                return v.asText();
            };
            return event(text, () -> event.get("data"), partition);
        }
        String prefix = nats ? "ce-" : "ce_";
        Attribute attribute = name -> {
            String a = header.get(prefix + name);
            return a == null && name.equals("datacontenttype") ? contentType : a;
        };
        return event(attribute, () -> Json.parse(value), partition);
    }

    private static String asciiLower(String s) {
        StringBuilder out = new StringBuilder(s.length());
        for (char c : s.toCharArray()) {
            out.append(c >= 'A' && c <= 'Z' ? (char) (c + 32) : c);
        }
        return out.toString();
    }

    private static String required(Attribute attribute, String name) throws BadRecordException {
        String a = attribute.get(name);
        if (a == null || a.isEmpty()) {
            throw new BadRecordException("missing_attribute", "no " + name + " attribute");
        }
        return a;
    }

    private static Received event(Attribute attribute, Data data, int partition) throws BadRecordException {
        String type = required(attribute, "type");
        String shortType = type.startsWith(PREFIX) ? type.substring(PREFIX.length()) : "";
        String change = CHANGES.get(shortType);
        if (change == null && !shortType.equals("sync.started") && !shortType.equals("sync.completed")) {
            return null;
        }
        String id = required(attribute, "id");
        String cluster = attribute.get("cluster");
        cluster = cluster == null ? "" : cluster;
        JsonNode d = data.get();
        if (d != null && d.isNull()) {
            d = null;
        }
        if (change == null) {
            return new Received(id, cluster, partition, marker(shortType.equals("sync.started"), d), null);
        }
        String resource = required(attribute, "apiversion") + "/" + required(attribute, "kind");
        String key = required(attribute, "subject");
        if (change.equals("deleted")) {
            return new Received(id, cluster, partition, null, new Object(change, resource, key, null, null));
        }
        if (d == null) {
            throw new BadRecordException("missing_attribute", "no data");
        }
        if ("application/json-patch+json".equals(attribute.get("datacontenttype"))) {
            return new Received(id, cluster, partition, null, new Object(change, resource, key, null, Patch.operations(d)));
        }
        if (!d.isObject()) {
            throw new BadRecordException("wrong_type", "the data is " + kind(d) + ", not an object");
        }
        return new Received(id, cluster, partition, null, new Object(change, resource, key, d, null));
    }

    private static String field(JsonNode data, boolean required, String... path) throws BadRecordException {
        JsonNode v = data;
        for (String name : path) {
            v = v != null && v.isObject() ? v.get(name) : null;
        }
        String where = "/" + String.join("/", path);
        if (v == null || v.isNull()) {
            if (required) {
                throw new BadRecordException("missing_attribute", "a marker without " + where);
            }
            return null;
        }
        if (!v.isTextual()) {
            throw new BadRecordException("wrong_type", "a marker's " + where + " is " + kind(v) + ", not a string");
        }
        return v.asText();
    }

    private static Marker marker(boolean started, JsonNode data) throws BadRecordException {
        if (data == null) {
            throw new BadRecordException("missing_attribute", "a marker without data");
        }
        String syncId = field(data, true, "syncId");
        String version = field(data, true, "resource", "version");
        String kind = field(data, true, "resource", "kind");
        String group = field(data, false, "resource", "group");
        String resource = (group == null || group.isEmpty() ? "" : group + "/") + version + "/" + kind;
        String mode = field(data, false, "mode");
        return new Marker(started, syncId, "full".equals(mode), resource, field(data, false, "namespace"));
    }

    private static String kind(JsonNode v) {
        if (v.isNull()) {
            return "null";
        }
        if (v.isBoolean()) {
            return "a boolean";
        }
        if (v.isNumber()) {
            return "a number";
        }
        if (v.isTextual()) {
            return "a string";
        }
        return v.isArray() ? "an array" : "an object";
    }

    private static boolean hex(byte c) {
        return Character.digit(c, 16) >= 0 && c < 0x80;
    }

    /** Undoes the NATS binding's percent-encoding: %XX is a byte, anything else stays. */
    static byte[] percentDecode(byte[] b) {
        ByteArrayOutputStream out = new ByteArrayOutputStream(b.length);
        for (int i = 0; i < b.length; i++) {
            if (b[i] == '%' && i + 2 < b.length && hex(b[i + 1]) && hex(b[i + 2])) {
                out.write(Character.digit(b[i + 1], 16) << 4 | Character.digit(b[i + 2], 16));
                i += 2;
            } else {
                out.write(b[i]);
            }
        }
        return out.toByteArray();
    }
}
