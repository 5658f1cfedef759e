package dev.deltaship.consumer;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;

/**
 * The consumer protocol of deltaship's event contract (vectors/README.md in the repository),
 * run per Kafka partition or over a JetStream stream (partition 0), as {@code deltaship
 * rebuild} runs it, with a {@link Listener}. Records are decoded by the rules the consumers
 * share ({@link Decode}), with the shared bounds ({@link Json}). A record that cannot be
 * applied throws {@link BadRecordException} and leaves the state as it was; a patch that does
 * not apply also marks its object stale, and later patches to it are refused until its next
 * whole object or delete. Not thread-safe.
 */
public final class Consumer {
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
    private final Set<String> stale = new HashSet<>();
    private final Map<String, Long> skipped = new TreeMap<>();
    private PrintStream report = System.err;
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

    /** Records skipped as bad, by reason. */
    public Map<String, Long> skipped() {
        return skipped;
    }

    /** Where {@link #skip} reports (null: nowhere); stderr by default. */
    public void reportTo(PrintStream report) {
        this.report = report;
    }

    /** Counts a record skipped as bad and reports it: {@code skipped record <where>: <reason>: <problem>}. */
    public void skip(String where, BadRecordException e) {
        skipped.merge(e.reason(), 1L, Long::sum);
        if (report != null) {
            report.println("skipped record " + where + ": " + e.getMessage());
        }
    }

    /** Applies one Kafka record of {@code partition}; a null value (a tombstone) is ignored. */
    public void kafkaRecord(int partition, Headers headers, byte[] value) throws BadRecordException {
        List<Map.Entry<String, byte[]>> pairs = new ArrayList<>();
        for (Header h : headers) {
            pairs.add(new AbstractMap.SimpleEntry<>(h.key(), h.value()));
        }
        apply(Decode.decode(false, pairs, value, partition));
    }

    /** Applies one JetStream message, its headers as (name, value) pairs. */
    public void natsMessage(List<Map.Entry<String, String>> headers, byte[] data) throws BadRecordException {
        List<Map.Entry<String, byte[]>> pairs = new ArrayList<>();
        for (Map.Entry<String, String> h : headers) {
            pairs.add(new AbstractMap.SimpleEntry<>(h.getKey(), h.getValue().getBytes(StandardCharsets.UTF_8)));
        }
        apply(Decode.decode(true, pairs, data == null ? new byte[0] : data, 0));
    }

    private void apply(Decode.Received r) throws BadRecordException {
        if (r == null || cluster != null && !cluster.equals(r.cluster())) {
            return;
        }
        if (!seen.add(r.partition() + "/" + r.id())) {
            duplicates++;
            return;
        }
        if (r.marker() != null) {
            marker(r.marker(), r.cluster(), r.partition());
            return;
        }
        Decode.Object o = r.object();
        for (OpenSync s : open.values()) {
            if (s.resource.equals(o.resource()) && s.cluster.equals(r.cluster())) {
                s.touched.add(o.key());
            }
        }
        String slot = o.resource() + "\u0000" + o.key();
        if (o.change().equals("deleted")) {
            remove(o.resource(), o.key());
            return;
        }
        JsonNode object = o.whole();
        if (o.ops() != null) {
            if (stale.contains(slot)) {
                throw new BadRecordException("patch_not_applied", "the object is stale: an earlier patch to it did not apply");
            }
            JsonNode stored = state.getOrDefault(o.resource(), Map.of()).get(o.key());
            if (stored == null) {
                throw new BadRecordException("patch_not_applied", "a patch for an object never received");
            }
            try {
                object = Patch.patched(stored, o.ops());
            } catch (BadRecordException e) {
                stale.add(slot);
                throw e;
            }
        } else {
            stale.remove(slot);
        }
        state.computeIfAbsent(o.resource(), x -> new TreeMap<>()).put(o.key(), object);
        homes.put(slot, new Home(r.partition(), r.cluster()));
        listener.upsert(o.resource(), o.key(), object);
    }

    private void marker(Decode.Marker m, String eventCluster, int partition) {
        String slot = partition + "/" + m.syncId();
        if (m.started()) {
            if (m.full()) {
                open.put(slot, new OpenSync(eventCluster, m.resource(), m.namespace()));
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
            for (String key : new ArrayList<>(objects.keySet())) {
                int cut = key.indexOf('/');
                boolean inScope = s.namespace == null || cut >= 0 && key.substring(0, cut).equals(s.namespace);
                if (inScope && !s.touched.contains(key) && here.equals(homes.get(s.resource + "\u0000" + key))) {
                    remove(s.resource, key);
                }
            }
        }
        listener.synced(s.resource, s.namespace);
    }

    private void remove(String resource, String key) {
        stale.remove(resource + "\u0000" + key);
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
