package dev.deltaship.consumer;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.math.BigInteger;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.Set;
import java.util.TreeMap;

/**
 * The consumer protocol of deltaship's event contract (vectors/README.md in the repository),
 * run per Kafka partition or over a JetStream stream (partition 0), as {@code deltaship
 * rebuild} runs it, with a {@link Listener}. Records are decoded by the rules the consumers
 * share ({@link Decode}), with the shared bounds ({@link Json}). A record that cannot be
 * applied throws {@link BadRecordException} and leaves the state as it was; a patch that does
 * not apply also marks its object stale, and later patches to it are refused until its next
 * whole object or delete. A {@code sync.completed} whose data carries {@code state} (count and
 * digest, vectors/README.md step 7) is checked against the objects held of its resource, cluster
 * and namespace scope on its partition: {@link #verified()} and {@link #mismatched()} count the
 * markers, {@link #onCheck} is told of each {@link Check}, and each mismatch is reported
 * ({@code state mismatch at marker ...}).
 *
 * <p>A consumer keeps its place: {@link #advance} records the next offset of each partition (the
 * readers call it), {@link #save()} writes the state, the protocol's memory and those positions to
 * a snapshot file at once, atomically, and {@link #resume} starts from it; the readers start each
 * partition at its {@link #position}.
 *
 * <pre>{@code
 * Consumer c = Consumer.resume(Path.of("prod.snapshot"), listener, "prod");
 * KafkaReader.read("kafka:9092", List.of("deltaship.prod.core.configmaps"), c); // from the saved positions
 * c.save();
 * }</pre>
 *
 * <p>Not thread-safe.
 */
public final class Consumer {
    /** The version of deltaship's event contract this library follows. */
    public static final int CONTRACT_VERSION = 2;

    /**
     * How many of the latest event ids a consumer remembers by default to skip repeats, beside the
     * last id of each object and marker scope it holds.
     */
    public static final int DEFAULT_REPEAT_WINDOW = Repeats.DEFAULT_WINDOW;

    /**
     * How many records a consumer with a snapshot file advances past between two saves by
     * default ({@link #saveEvery}): each save writes the whole state and repeat window.
     */
    public static final int DEFAULT_SAVE_EVERY = 10_000;

    /** The version of the snapshot file's format this library writes and reads. */
    public static final int SNAPSHOT_FORMAT = Snapshot.FORMAT;

    record Home(int partition, String cluster) {}

    /** Where an object lives, its term, and the id of its last event. */
    record Placed(Home home, BigInteger term, String id) {}

    private static final BigInteger MOD = BigInteger.ONE.shiftLeft(128);

    /**
     * A marker's count and digest compared with the state held at it: counts unsigned, digests
     * 32 lowercase hex digits, {@code namespace} null for all namespaces.
     */
    public record Check(String syncId, String cluster, String resource, String namespace, int partition,
            long expectedCount, String expectedDigest, long heldCount, String heldDigest) {
        /** Whether the held state matched the marker's figures. */
        public boolean ok() {
            return expectedCount == heldCount && expectedDigest.equals(heldDigest);
        }

        @Override
        public String toString() {
            String scope = namespace == null ? "all namespaces" : "namespace " + namespace;
            return "marker " + syncId + " of " + resource + " in " + scope + " on partition " + partition + " (cluster " + cluster + "): expected count "
                    + Long.toUnsignedString(expectedCount) + " digest " + expectedDigest + ", held count " + Long.toUnsignedString(heldCount) + " digest "
                    + heldDigest;
        }
    }

    /** An object's term: the first 16 bytes of SHA-256(key "\n" uid "\n" resourceVersion), big-endian. */
    static BigInteger term(String key, String uid, String resourceVersion) {
        try {
            byte[] hash = MessageDigest.getInstance("SHA-256").digest((key + "\n" + uid + "\n" + resourceVersion).getBytes(StandardCharsets.UTF_8));
            return new BigInteger(1, Arrays.copyOf(hash, 16));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java platform has SHA-256", e);
        }
    }

    private static String hex(BigInteger digest) {
        return String.format("%032x", digest);
    }

    static final class OpenSync {
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
    final String cluster;
    final Map<String, Map<String, JsonNode>> state = new TreeMap<>();
    final Map<String, Placed> homes = new HashMap<>();
    final Map<String, OpenSync> open = new HashMap<>();
    final Repeats window;
    /** The id of the last marker of each marker key (resource, namespace scope, mode, phase), per partition and cluster. */
    final Map<String, String> markers = new HashMap<>();
    final Set<String> stale = new HashSet<>();
    final Map<String, Long> skipped = new TreeMap<>();
    /** Source (topic or stream) to partition to the offset or sequence of its next record. */
    final Map<String, Map<Integer, Long>> positions = new TreeMap<>();
    private PrintStream report = System.err;
    private java.util.function.Consumer<Check> onCheck = check -> {};
    long duplicates;
    long verified;
    long mismatched;
    private Path snapshot;
    private int saveEvery = DEFAULT_SAVE_EVERY;
    private int unsaved;

    /**
     * @param listener told of each change (null: none)
     * @param cluster apply only this cluster's events (null: all)
     */
    public Consumer(Listener listener, String cluster) {
        this(listener, cluster, DEFAULT_REPEAT_WINDOW);
    }

    /**
     * @param listener told of each change (null: none)
     * @param cluster apply only this cluster's events (null: all)
     * @param repeatWindow how many of the latest event ids are remembered to skip repeats, beside
     *     the last id of each object and marker scope held
     */
    public Consumer(Listener listener, String cluster, int repeatWindow) {
        this.listener = listener == null ? new Listener() {} : listener;
        this.cluster = cluster;
        this.window = new Repeats(repeatWindow);
    }

    /**
     * The consumer saved in the file {@code snapshot}, saving there again ({@link #save()}, and
     * every {@link #saveEvery} records through {@link #advance}), or a new one when there is no
     * such file yet. The listener is not told of the state restored.
     *
     * @param snapshot the snapshot file
     * @param listener told of each change (null: none)
     * @param cluster apply only this cluster's events (null: all); the snapshot's own
     * @throws IllegalArgumentException the file is not a snapshot, or was taken with another cluster
     * @throws IOException the file cannot be read
     */
    public static Consumer resume(Path snapshot, Listener listener, String cluster) throws IOException {
        return resume(snapshot, listener, cluster, DEFAULT_REPEAT_WINDOW);
    }

    /**
     * As {@link #resume(Path, Listener, String)}, with the size of the repeat window.
     *
     * @param snapshot the snapshot file
     * @param listener told of each change (null: none)
     * @param cluster apply only this cluster's events (null: all); the snapshot's own
     * @param repeatWindow how many of the latest event ids are remembered to skip repeats
     * @throws IOException the file cannot be read
     */
    public static Consumer resume(Path snapshot, Listener listener, String cluster, int repeatWindow) throws IOException {
        Consumer c = new Consumer(listener, cluster, repeatWindow);
        c.snapshot = snapshot;
        JsonNode doc = Snapshot.read(snapshot);
        if (doc != null) {
            try {
                Snapshot.restore(c, doc, snapshot);
            } catch (IllegalArgumentException e) {
                throw e;
            } catch (RuntimeException e) {
                throw new IllegalArgumentException(snapshot + " is not a snapshot: " + e.getMessage(), e);
            }
        }
        return c;
    }

    /** With a snapshot file, {@link #advance} saves every {@code records} records (default {@link #DEFAULT_SAVE_EVERY}). */
    public void saveEvery(int records) {
        if (records < 1) {
            throw new IllegalArgumentException("saveEvery(" + records + "): give at least 1 (records between two saves)");
        }
        this.saveEvery = records;
    }

    /**
     * The offset (JetStream: stream sequence) of the next record to read of {@code source}'s
     * {@code partition}, empty when none was read. The readers start there.
     */
    public OptionalLong position(String source, int partition) {
        Long next = positions.getOrDefault(source, Map.of()).get(partition);
        return next == null ? OptionalLong.empty() : OptionalLong.of(next);
    }

    /**
     * Records that the records of {@code source}'s {@code partition} before {@code next} were
     * applied (or skipped); the readers call it after each record. With a snapshot file, saves
     * it every {@link #saveEvery} records.
     *
     * @throws UncheckedIOException the snapshot could not be written
     */
    public void advance(String source, int partition, long next) {
        positions.computeIfAbsent(source, x -> new TreeMap<>()).put(partition, next);
        unsaved++;
        if (snapshot != null && unsaved >= saveEvery) {
            try {
                save();
            } catch (IOException e) {
                throw new UncheckedIOException("writing the snapshot " + snapshot + ": " + e.getMessage(), e);
            }
        }
    }

    /**
     * Writes the snapshot (the state, the protocol's memory, the positions) to the file given to
     * {@link #resume} atomically: a crash at any moment leaves the previous snapshot or this one.
     *
     * @throws IOException the file could not be written
     */
    public void save() throws IOException {
        if (snapshot == null) {
            throw new IllegalStateException("no snapshot file to save to: make the consumer with Consumer.resume(path, ...), or call save(path)");
        }
        save(snapshot);
    }

    /**
     * Writes the snapshot to {@code path} atomically.
     *
     * @throws IOException the file could not be written
     */
    public void save(Path path) throws IOException {
        Snapshot.writeAtomically(path, Json.MAPPER.writeValueAsBytes(Snapshot.of(this)));
        unsaved = 0;
    }

    /** The state: resource ({@code <apiVersion>/<Kind>}) to key to object. */
    public Map<String, Map<String, JsonNode>> state() {
        return state;
    }

    /** Events skipped as repeats (same id, same partition) of one applied. */
    public long duplicates() {
        return duplicates;
    }

    /** Records skipped as bad, by reason. */
    public Map<String, Long> skipped() {
        return skipped;
    }

    /** {@code sync.completed} markers whose count and digest matched the state held at them. */
    public long verified() {
        return verified;
    }

    /** {@code sync.completed} markers whose count and digest did not match the state held at them. */
    public long mismatched() {
        return mismatched;
    }

    /** Told of each marker whose count and digest were checked (null: nobody). */
    public void onCheck(java.util.function.Consumer<Check> onCheck) {
        this.onCheck = onCheck == null ? check -> {} : onCheck;
    }

    /** Where {@link #skip} and mismatched markers report (null: nowhere); stderr by default. */
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

    /**
     * Applies one Kafka record of {@code partition}, its headers as (name, value) pairs in the
     * record's order; a null value (a tombstone) is ignored.
     */
    public void kafkaRecord(int partition, List<Map.Entry<String, byte[]>> headers, byte[] value) throws BadRecordException {
        apply(Decode.decode(false, headers, value, partition));
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
        String seen = r.partition() + "/" + r.id();
        if (repeated(r, seen)) {
            duplicates++;
            return;
        }
        window.add(seen);
        if (r.marker() != null) {
            markers.put(scope(r.marker(), r.cluster(), r.partition()), r.id());
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
            Placed held = homes.get(slot);
            if (held != null) {
                // A patch refused below is still the object's latest event.
                homes.put(slot, new Placed(held.home(), held.term(), r.id()));
            }
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
        homes.put(slot, new Placed(new Home(r.partition(), r.cluster()), term(o.key(), o.uid(), o.resourceVersion()), r.id()));
        listener.upsert(o.resource(), o.key(), object);
    }

    /**
     * Whether {@code r} repeats an event already applied: a repeat never arrives after a newer
     * event of the same key, so it is the last event of its object (or marker scope) when that is
     * still held, and else one of the latest ids.
     */
    private boolean repeated(Decode.Received r, String seen) {
        if (window.has(seen)) {
            return true;
        }
        if (r.marker() != null) {
            return r.id().equals(markers.get(scope(r.marker(), r.cluster(), r.partition())));
        }
        Placed p = homes.get(r.object().resource() + "\u0000" + r.object().key());
        return p != null && p.home().equals(new Home(r.partition(), r.cluster())) && r.id().equals(p.id());
    }

    /** The marker key deltaship sends {@code m} under, on its partition, of its cluster: where its repeats come. */
    private static String scope(Decode.Marker m, String eventCluster, int partition) {
        return String.join("\u0000", Integer.toString(partition), eventCluster, m.resource(), m.namespace() == null ? "\u0001" : m.namespace(),
                Boolean.toString(m.full()), Boolean.toString(m.started()));
    }

    /** How many event ids the repeat window holds now (at most twice its size). */
    int windowed() {
        return window.size();
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
        if (s != null) {
            Map<String, JsonNode> objects = state.get(s.resource);
            if (objects != null) {
                Home here = new Home(partition, s.cluster);
                for (String key : new ArrayList<>(objects.keySet())) {
                    Placed p = homes.get(s.resource + "\u0000" + key);
                    if (inScope(key, s.namespace) && !s.touched.contains(key) && p != null && here.equals(p.home())) {
                        remove(s.resource, key);
                    }
                }
            }
            listener.synced(s.resource, s.namespace);
        }
        if (m.state() != null) {
            check(m, eventCluster, partition);
        }
    }

    private void check(Decode.Marker m, String eventCluster, int partition) {
        Home here = new Home(partition, eventCluster);
        long count = 0;
        BigInteger digest = BigInteger.ZERO;
        for (String key : state.getOrDefault(m.resource(), Map.of()).keySet()) {
            Placed p = homes.get(m.resource() + "\u0000" + key);
            if (inScope(key, m.namespace()) && p != null && here.equals(p.home())) {
                count++;
                digest = digest.add(p.term()).mod(MOD);
            }
        }
        Check check = new Check(m.syncId(), eventCluster, m.resource(), m.namespace(), partition, m.state().count(), hex(m.state().digest()), count, hex(digest));
        if (check.ok()) {
            verified++;
        } else {
            mismatched++;
            if (report != null) {
                report.println("state mismatch at " + check);
            }
        }
        onCheck.accept(check);
    }

    /** Whether {@code key} is within a marker's namespace scope (null: all namespaces). */
    private static boolean inScope(String key, String namespace) {
        int cut = key.indexOf('/');
        return namespace == null || cut >= 0 && key.substring(0, cut).equals(namespace);
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
