package dev.deltaship.consumer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Snapshots: a consumer's state, its protocol memory and its positions in the stream, in one
 * JSON file replaced atomically (written to a temporary file beside it, flushed to disk, then
 * renamed over it, and the directory flushed), so that a consumer killed at any moment restarts
 * from one consistent point. The format is docs/consumers/README.md's "Resuming from a snapshot".
 */
final class Snapshot {
    /** The version of the snapshot file's format this library writes and reads. */
    static final int FORMAT = 1;

    private Snapshot() {}

    /** Replaces the file at {@code path} with {@code text}: at any moment the old file or the new one, complete. */
    static void writeAtomically(Path path, byte[] text) throws IOException {
        Path dir = path.toAbsolutePath().getParent();
        Path temporary = Files.createTempFile(dir, path.getFileName() + ".", ".tmp");
        try {
            try (FileChannel f = FileChannel.open(temporary, StandardOpenOption.WRITE)) {
                ByteBuffer buffer = ByteBuffer.wrap(text);
                while (buffer.hasRemaining()) {
                    f.write(buffer);
                }
                f.force(true);
            }
            Files.move(temporary, path, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (IOException | RuntimeException e) {
            Files.deleteIfExists(temporary);
            throw e;
        }
        // The rename itself is durable once the directory is.
        try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
            d.force(true);
        }
    }

    /** The document a snapshot file holds for {@code c}. */
    static ObjectNode of(Consumer c) {
        ObjectNode doc = Json.object();
        doc.put("snapshot", FORMAT);
        doc.put("contract", Consumer.CONTRACT_VERSION);
        doc.put("cluster", c.cluster);
        ObjectNode positions = doc.putObject("positions");
        c.positions.forEach((source, parts) -> {
            ObjectNode of = positions.putObject(source);
            parts.forEach((p, next) -> of.put(Integer.toString(p), next));
        });
        ObjectNode state = doc.putObject("state");
        c.state.forEach((resource, objects) -> {
            ObjectNode of = state.putObject(resource);
            objects.forEach(of::set);
        });
        ArrayNode objects = doc.putArray("objects");
        c.homes.forEach((slot, p) -> {
            String[] rk = slot.split("\u0000", 2);
            objects.addObject().put("resource", rk[0]).put("key", rk[1]).put("partition", p.home().partition()).put("cluster", p.home().cluster())
                    .put("term", String.format("%032x", p.term())).put("id", p.id());
        });
        ArrayNode stale = doc.putArray("stale");
        for (String slot : c.stale) {
            String[] rk = slot.split("\u0000", 2);
            stale.addObject().put("resource", rk[0]).put("key", rk[1]);
        }
        ArrayNode syncs = doc.putArray("syncs");
        c.open.forEach((slot, s) -> {
            String[] pid = slot.split("/", 2);
            ObjectNode sync = syncs.addObject().put("partition", Integer.parseInt(pid[0])).put("syncId", pid[1]).put("cluster", s.cluster)
                    .put("resource", s.resource).put("namespace", s.namespace);
            ArrayNode touched = sync.putArray("touched");
            new TreeSet<>(s.touched).forEach(touched::add);
        });
        ArrayNode markers = doc.putArray("markers");
        c.markers.forEach((scope, id) -> {
            String[] s = scope.split("\u0000", -1);
            markers.addObject().put("partition", Integer.parseInt(s[0])).put("cluster", s[1]).put("resource", s[2])
                    .put("namespace", s[3].equals("\u0001") ? null : s[3]).put("full", Boolean.parseBoolean(s[4])).put("started", Boolean.parseBoolean(s[5]))
                    .put("id", id);
        });
        ObjectNode window = doc.putObject("window");
        window.set("previous", byPartition(c.window.previous()));
        window.set("current", byPartition(c.window.current()));
        doc.put("duplicates", c.duplicates);
        doc.put("verified", c.verified);
        doc.put("mismatched", c.mismatched);
        ObjectNode skipped = doc.putObject("skipped");
        c.skipped.forEach(skipped::put);
        return doc;
    }

    private static ObjectNode byPartition(Set<String> ids) {
        Map<Integer, List<String>> parts = new TreeMap<>();
        for (String seen : new TreeSet<>(ids)) {
            String[] pid = seen.split("/", 2);
            parts.computeIfAbsent(Integer.parseInt(pid[0]), x -> new ArrayList<>()).add(pid[1]);
        }
        ObjectNode out = Json.object();
        parts.forEach((p, list) -> {
            ArrayNode a = out.putArray(Integer.toString(p));
            list.forEach(a::add);
        });
        return out;
    }

    /** The snapshot document at {@code path}, or null when there is no file. */
    static JsonNode read(Path path) throws IOException {
        byte[] text;
        try {
            text = Files.readAllBytes(path);
        } catch (NoSuchFileException e) {
            return null;
        }
        try {
            return Json.MAPPER.readTree(text);
        } catch (IOException e) {
            throw new IllegalArgumentException(path + " is not a snapshot (not JSON: " + e.getMessage() + ")", e);
        }
    }

    /** Puts the snapshot {@code doc} (read from {@code where}) into the new consumer {@code c}. */
    static void restore(Consumer c, JsonNode doc, Path where) {
        if (doc.path("snapshot").asInt(-1) != FORMAT) {
            throw new IllegalArgumentException(where + " is not a snapshot of format " + FORMAT + " (it says " + doc.get("snapshot") + "): take a new one with this library");
        }
        if (doc.path("contract").asInt(-1) != Consumer.CONTRACT_VERSION) {
            throw new IllegalArgumentException(where + " was taken under event contract " + doc.get("contract") + "; this library reads contract " + Consumer.CONTRACT_VERSION);
        }
        String taken = doc.path("cluster").isNull() ? null : doc.path("cluster").asText();
        if (taken == null ? c.cluster != null : !taken.equals(c.cluster)) {
            throw new IllegalArgumentException(where + " was taken with cluster " + taken + ": resume it with that cluster, or start a new snapshot");
        }
        for (Iterator<Map.Entry<String, JsonNode>> sources = doc.required("positions").fields(); sources.hasNext(); ) {
            Map.Entry<String, JsonNode> source = sources.next();
            for (Iterator<Map.Entry<String, JsonNode>> parts = source.getValue().fields(); parts.hasNext(); ) {
                Map.Entry<String, JsonNode> p = parts.next();
                c.positions.computeIfAbsent(source.getKey(), x -> new TreeMap<>()).put(Integer.parseInt(p.getKey()), p.getValue().asLong());
            }
        }
        for (Iterator<Map.Entry<String, JsonNode>> resources = doc.required("state").fields(); resources.hasNext(); ) {
            Map.Entry<String, JsonNode> resource = resources.next();
            Map<String, JsonNode> objects = c.state.computeIfAbsent(resource.getKey(), x -> new TreeMap<>());
            resource.getValue().fields().forEachRemaining(o -> objects.put(o.getKey(), o.getValue()));
        }
        for (JsonNode o : doc.required("objects")) {
            c.homes.put(o.required("resource").asText() + "\u0000" + o.required("key").asText(), new Consumer.Placed(
                    new Consumer.Home(o.required("partition").asInt(), o.required("cluster").asText()), new BigInteger(o.required("term").asText(), 16), o.required("id").asText()));
        }
        for (JsonNode s : doc.required("stale")) {
            c.stale.add(s.required("resource").asText() + "\u0000" + s.required("key").asText());
        }
        for (JsonNode s : doc.required("syncs")) {
            Consumer.OpenSync sync = new Consumer.OpenSync(s.required("cluster").asText(), s.required("resource").asText(), text(s.get("namespace")));
            s.required("touched").forEach(key -> sync.touched.add(key.asText()));
            c.open.put(s.required("partition").asInt() + "/" + s.required("syncId").asText(), sync);
        }
        for (JsonNode m : doc.required("markers")) {
            String ns = text(m.get("namespace"));
            String scope = String.join("\u0000", Integer.toString(m.required("partition").asInt()), m.required("cluster").asText(), m.required("resource").asText(),
                    ns == null ? "\u0001" : ns, Boolean.toString(m.required("full").asBoolean()), Boolean.toString(m.required("started").asBoolean()));
            c.markers.put(scope, m.required("id").asText());
        }
        JsonNode window = doc.required("window");
        c.window.restore(ids(window.required("previous")), ids(window.required("current")));
        c.duplicates = doc.required("duplicates").asLong();
        c.verified = doc.required("verified").asLong();
        c.mismatched = doc.required("mismatched").asLong();
        doc.required("skipped").fields().forEachRemaining(e -> c.skipped.put(e.getKey(), e.getValue().asLong()));
    }

    private static String text(JsonNode v) {
        return v == null || v.isNull() ? null : v.asText();
    }

    private static Set<String> ids(JsonNode byPartition) {
        Set<String> out = new HashSet<>();
        byPartition.fields().forEachRemaining(p -> p.getValue().forEach(id -> out.add(p.getKey() + "/" + id.asText())));
        return out;
    }
}
