package dev.deltaship.consumer;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.ByteArrayOutputStream;
import java.math.BigInteger;
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

    /** A marker; {@code state}: a completed marker's count and digest, or null. */
    record Marker(boolean started, String syncId, boolean full, String resource, String namespace, Figures state) {}

    /** A count and a digest (the sum of terms modulo 2^128); {@code count} unsigned. */
    record Figures(long count, BigInteger digest) {}

    /**
     * An object event: {@code whole} the object, or {@code ops} a patch's; neither for deleted;
     * {@code uid} and {@code resourceVersion} its extensions ("" when absent).
     */
    record Object(String change, String resource, String key, JsonNode whole, List<JsonNode> ops, String uid, String resourceVersion) {}

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
        JsonNode whole = null;
        List<JsonNode> ops = null;
        if (!change.equals("deleted")) {
            if (d == null) {
                throw new BadRecordException("missing_attribute", "no data");
            }
            if ("application/json-patch+json".equals(attribute.get("datacontenttype"))) {
                ops = Patch.operations(d);
            } else if (!d.isObject()) {
                throw new BadRecordException("wrong_type", "the data is " + kind(d) + ", not an object");
            } else {
                whole = d;
            }
        }
        // The count-and-digest term's identity: absent is "".
        String uid = attribute.get("uid");
        String resourceVersion = attribute.get("resourceversion");
        return new Received(id, cluster, partition, null,
                new Object(change, resource, key, whole, ops, uid == null ? "" : uid, resourceVersion == null ? "" : resourceVersion));
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
        String namespace = field(data, false, "namespace");
        return new Marker(started, syncId, "full".equals(mode), resource, namespace, started ? null : state(data.get("state")));
    }

    private static final BigInteger MAX_COUNT = BigInteger.ONE.shiftLeft(64);

    /**
     * A completed marker's state: absent or null, or {"count": integer from 0, "digest": 32
     * lowercase hex digits} (a member absent: missing_attribute; anything else: wrong_type).
     */
    private static Figures state(JsonNode state) throws BadRecordException {
        if (state == null || state.isNull()) {
            return null;
        }
        if (!state.isObject()) {
            throw new BadRecordException("wrong_type", "a marker's /state is " + kind(state) + ", not an object");
        }
        JsonNode count = state.get("count");
        if (count == null || count.isNull()) {
            throw new BadRecordException("missing_attribute", "a marker without /state/count");
        }
        if (!count.isIntegralNumber() || count.bigIntegerValue().signum() < 0 || count.bigIntegerValue().compareTo(MAX_COUNT) >= 0) {
            throw new BadRecordException("wrong_type", "a marker's /state/count is " + count + ", not an integer from 0");
        }
        JsonNode digest = state.get("digest");
        if (digest == null || digest.isNull()) {
            throw new BadRecordException("missing_attribute", "a marker without /state/digest");
        }
        if (!digest.isTextual() || !digest.asText().matches("[0-9a-f]{32}")) {
            throw new BadRecordException("wrong_type", "a marker's /state/digest is " + digest + ", not 32 lowercase hex digits");
        }
        return new Figures(count.bigIntegerValue().longValue(), new BigInteger(digest.asText(), 16));
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
