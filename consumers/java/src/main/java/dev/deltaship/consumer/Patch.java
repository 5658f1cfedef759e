package dev.deltaship.consumer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * RFC 6902 JSON Patch, applied as {@code deltaship rebuild} applies it (vectors/README.md,
 * "JSON Patch"): all or nothing, refused before any operation that would make the object
 * hold more than {@link Json#MAX_VALUES} values or nest deeper than {@link Json#MAX_DEPTH},
 * or that leaves something other than an object.
 */
final class Patch {
    private static final Map<String, List<String>> FIELDS = Map.of(
            "add", List.of("path", "value"), "remove", List.of("path"), "replace", List.of("path", "value"),
            "move", List.of("from", "path"), "copy", List.of("from", "path"), "test", List.of("path", "value"));
    private static final Pattern POINTER = Pattern.compile("(/([^~/]|~[01])*)*");
    private static final Pattern INDEX = Pattern.compile("0|[1-9][0-9]{0,8}");

    private Patch() {}

    /** The operations of a JSON Patch, checked for their members ({@code wrong_type}). */
    static List<JsonNode> operations(JsonNode data) throws BadRecordException {
        if (!data.isArray()) {
            throw new BadRecordException("wrong_type", "the data is not a JSON Patch: not an array");
        }
        List<JsonNode> ops = new ArrayList<>();
        int n = 0;
        for (JsonNode op : data) {
            JsonNode kind = op.get("op");
            if (!op.isObject() || kind == null || !kind.isTextual() || !FIELDS.containsKey(kind.asText())) {
                throw new BadRecordException("wrong_type", "the data is not a JSON Patch: operation " + n + " has no known op");
            }
            for (String name : FIELDS.get(kind.asText())) {
                JsonNode v = op.get(name);
                if (v == null) {
                    throw new BadRecordException("wrong_type", "the data is not a JSON Patch: operation " + n + " has no " + name);
                }
                if (!name.equals("value") && !(v.isTextual() && POINTER.matcher(v.asText()).matches())) {
                    throw new BadRecordException("wrong_type", "the data is not a JSON Patch: operation " + n + "'s " + name + " is not a JSON Pointer");
                }
            }
            ops.add(op);
            n++;
        }
        return ops;
    }

    private static BadRecordException notApplied(String problem) {
        return new BadRecordException("patch_not_applied", problem);
    }

    private static String unescape(String token) {
        return token.replace("~1", "/").replace("~0", "~");
    }

    /** The value at {@code pointer}, or null. */
    private static JsonNode get(JsonNode doc, String pointer) {
        if (pointer.isEmpty()) {
            return doc;
        }
        if (!pointer.startsWith("/")) {
            return null;
        }
        for (String raw : pointer.substring(1).split("/", -1)) {
            String t = unescape(raw);
            if (doc.isObject()) {
                doc = doc.get(t);
            } else if (doc.isArray() && INDEX.matcher(t).matches() && Integer.parseInt(t) < doc.size()) {
                doc = doc.get(Integer.parseInt(t));
            } else {
                return null;
            }
            if (doc == null) {
                return null;
            }
        }
        return doc;
    }

    private static int index(String token, int length, boolean pastEnd) throws BadRecordException {
        int i = length;
        if (!token.equals("-")) {
            if (!INDEX.matcher(token).matches()) {
                throw notApplied("\"" + token + "\" is not an array index");
            }
            i = Integer.parseInt(token);
        }
        if (i > length || i == length && !pastEnd) {
            throw notApplied("index " + token + " is out of bounds");
        }
        return i;
    }

    private static JsonNode parent(JsonNode doc, String pointer) throws BadRecordException {
        JsonNode parent = get(doc, pointer.substring(0, pointer.lastIndexOf('/')));
        if (parent == null || !parent.isContainerNode()) {
            throw notApplied("no parent for " + pointer);
        }
        return parent;
    }

    private static String last(String pointer) {
        return unescape(pointer.substring(pointer.lastIndexOf('/') + 1));
    }

    private static JsonNode add(JsonNode doc, String pointer, JsonNode value) throws BadRecordException {
        if (pointer.isEmpty()) {
            return value;
        }
        JsonNode parent = parent(doc, pointer);
        if (parent.isObject()) {
            ((ObjectNode) parent).set(last(pointer), value);
        } else {
            ((ArrayNode) parent).insert(index(last(pointer), parent.size(), true), value);
        }
        return doc;
    }

    private static JsonNode remove(JsonNode doc, String pointer) throws BadRecordException {
        if (pointer.isEmpty()) {
            throw notApplied("cannot remove the whole document");
        }
        JsonNode parent = parent(doc, pointer);
        if (parent.isObject()) {
            JsonNode v = ((ObjectNode) parent).remove(last(pointer));
            if (v == null) {
                throw notApplied("nothing at " + pointer);
            }
            return v;
        }
        return ((ArrayNode) parent).remove(index(last(pointer), parent.size(), false));
    }

    private static JsonNode apply(JsonNode doc, JsonNode op) throws BadRecordException {
        String path = op.get("path").asText();
        String from = op.has("from") ? op.get("from").asText() : "";
        switch (op.get("op").asText()) {
            case "add":
                return add(doc, path, op.get("value").deepCopy());
            case "remove":
                remove(doc, path);
                return doc;
            case "replace": {
                if (get(doc, path) == null) {
                    throw notApplied("nothing at " + path);
                }
                if (path.isEmpty()) {
                    return op.get("value").deepCopy();
                }
                JsonNode parent = parent(doc, path);
                if (parent.isObject()) {
                    ((ObjectNode) parent).set(last(path), op.get("value").deepCopy());
                } else {
                    ((ArrayNode) parent).set(Integer.parseInt(last(path)), op.get("value").deepCopy());
                }
                return doc;
            }
            case "move":
                if (path.length() > from.length() && path.startsWith(from) && path.charAt(from.length()) == '/') {
                    throw notApplied("cannot move a value inside itself");
                }
                return add(doc, path, remove(doc, from));
            case "copy": {
                JsonNode v = get(doc, from);
                if (v == null) {
                    throw notApplied("nothing at " + from);
                }
                return add(doc, path, v.deepCopy());
            }
            default: {
                JsonNode v = get(doc, path);
                if (v == null) {
                    throw notApplied("nothing at " + path);
                }
                if (!Json.same(v, op.get("value"))) {
                    throw notApplied("test failed at " + path);
                }
                return doc;
            }
        }
    }

    /** {@code stored} with {@code ops} applied ({@code stored} is left as it was). */
    static JsonNode patched(JsonNode stored, List<JsonNode> ops) throws BadRecordException {
        JsonNode doc = stored.deepCopy();
        long values = Json.measure(doc)[0];
        for (JsonNode op : ops) {
            String kind = op.get("op").asText();
            if (!kind.equals("remove") && !kind.equals("test")) {
                JsonNode source = kind.equals("add") || kind.equals("replace") ? op.get("value") : get(doc, op.get("from").asText());
                long[] m = source == null ? new long[] {0, 0} : Json.measure(source);
                // Values only grow by what is added, replaced in or copied (an upper bound).
                if (!kind.equals("move")) {
                    values += m[0];
                }
                if (values > Json.MAX_VALUES) {
                    throw notApplied("the patch would make the object hold more than " + Json.MAX_VALUES + " JSON values");
                }
                String path = op.get("path").asText();
                if (path.chars().filter(c -> c == '/').count() + m[1] > Json.MAX_DEPTH) {
                    throw notApplied("the patch would nest the object deeper than " + Json.MAX_DEPTH + " levels");
                }
            } else if (values > Json.MAX_VALUES) {
                throw notApplied("the patch would make the object hold more than " + Json.MAX_VALUES + " JSON values");
            }
            doc = apply(doc, op);
        }
        if (!doc.isObject()) {
            throw notApplied("the patch would make the object something other than an object");
        }
        return doc;
    }
}
