package dev.deltaship.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Repeats are skipped in memory that does not grow with the stream. */
class RepeatsTest {
    /** The heap in use once collected, in bytes. */
    static long heap() {
        Runtime rt = Runtime.getRuntime();
        for (int i = 0; i < 3; i++) {
            System.gc();
        }
        return rt.totalMemory() - rt.freeMemory();
    }

    /** An event id of 32 hex digits, as deltaship's are. */
    private static String id(int i) {
        String hex = Integer.toHexString(i);
        return "0".repeat(32 - hex.length()) + hex;
    }

    @Test
    void theWindowRemembersTheLatestIdsInBoundedMemory() {
        long before = heap();
        Repeats w = new Repeats(Repeats.DEFAULT_WINDOW);
        int n = 3 * Repeats.DEFAULT_WINDOW;
        for (int i = 0; i < n; i++) {
            w.add("0/" + id(i));
        }
        for (int i = n - Repeats.DEFAULT_WINDOW; i < n; i++) {
            assertTrue(w.has("0/" + id(i)), "one of the latest ids forgotten: " + i);
        }
        assertFalse(w.has("0/" + id(0)));
        assertTrue(w.size() <= 2 * Repeats.DEFAULT_WINDOW);
        long grown = heap() - before;
        System.out.printf("window of %d ids: %d held, heap grew %d MiB%n", Repeats.DEFAULT_WINDOW, w.size(), grown >> 20);
        assertTrue(grown < 96L << 20, grown + " bytes for " + w.size() + " ids");
    }

    /** The headers of a Kafka record of an update of ns/{@code key}, of cluster c1. */
    static List<Map.Entry<String, byte[]>> update(String id, String key) {
        List<Map.Entry<String, byte[]>> headers = new ArrayList<>();
        for (String[] h : new String[][] {{"ce_id", id}, {"ce_type", "dev.deltaship.object.updated"}, {"ce_subject", "ns/" + key}, {"ce_apiversion", "v1"},
                {"ce_kind", "ConfigMap"}, {"ce_cluster", "c1"}, {"content-type", "application/json"}}) {
            headers.add(new AbstractMap.SimpleEntry<>(h[0], h[1].getBytes(StandardCharsets.UTF_8)));
        }
        return headers;
    }

    /** The value of an update of ns/{@code key}: its data {@code v}. */
    static byte[] value(String key, int v) {
        return ("{\"metadata\":{\"name\":\"" + key + "\",\"namespace\":\"ns\"},\"data\":{\"v\":\"" + v + "\"}}").getBytes(StandardCharsets.UTF_8);
    }

    @Test
    void updatesOfAFewKeysKeepMemoryFlatAndLateRepeatsOfHeldObjectsAreSkipped() throws BadRecordException {
        int window = 10_000;
        Consumer c = new Consumer(null, "c1", window);
        c.kafkaRecord(0, update("quiet-1", "quiet"), value("quiet", 1));
        long before = heap();
        int n = 3 * window;
        for (int i = 0; i < n; i++) {
            String key = "k" + i % 4;
            c.kafkaRecord(0, update(Integer.toString(i), key), value(key, i));
        }
        long grown = heap() - before;
        System.out.printf("heap after %d updates: %d MiB over the start; %d ids in the window%n", n, grown >> 20, c.windowed());
        assertTrue(c.windowed() <= 2 * window);
        assertTrue(grown < 16L << 20, grown + " bytes");
        c.kafkaRecord(0, update("quiet-1", "quiet"), value("quiet", 1));
        assertEquals(1, c.duplicates(), "a repeat of quiet's last event, " + n + " events later");
        assertEquals(5, c.state().get("v1/ConfigMap").size());
    }

    /** The headers of a Kafka record of a sync's {@code phase} ("started", "completed") marker of ConfigMaps, of cluster c1. */
    static List<Map.Entry<String, byte[]>> syncMarker(String id, String phase) {
        List<Map.Entry<String, byte[]>> headers = new ArrayList<>();
        for (String[] h : new String[][] {{"ce_id", id}, {"ce_type", "dev.deltaship.sync." + phase}, {"ce_apiversion", "v1"}, {"ce_kind", "ConfigMap"},
                {"ce_cluster", "c1"}, {"content-type", "application/json"}}) {
            headers.add(new AbstractMap.SimpleEntry<>(h[0], h[1].getBytes(StandardCharsets.UTF_8)));
        }
        return headers;
    }

    /** The data of a full sync's marker of ConfigMaps in every namespace. */
    static byte[] syncData(String syncId) {
        return ("{\"syncId\": \"" + syncId + "\", \"mode\": \"full\", \"resource\": {\"group\": \"\", \"version\": \"v1\", \"kind\": \"ConfigMap\"}}")
                .getBytes(StandardCharsets.UTF_8);
    }

    @Test
    void aRepeatOfAMarkerIsSkippedAsLongAsItIsItsScopesLast() throws BadRecordException {
        Consumer c = new Consumer(null, "c1", 1);
        List<Map.Entry<String, byte[]>> marker = syncMarker("m1", "started");
        byte[] data = syncData("s1");
        c.kafkaRecord(0, marker, data);
        c.kafkaRecord(0, update("a1", "a"), value("a", 1));
        c.kafkaRecord(0, marker, data);
        assertEquals(1, c.duplicates(), "the marker's repeat after an object event, with a window of one id");
        c.kafkaRecord(1, marker, data);
        assertEquals(1, c.duplicates(), "the same marker id on another partition is that partition's copy");
    }
}
