package dev.deltaship.consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Memory stays flat over millions of events: the protocol's memory of repeats is bounded. */
class LongRunTest {
    private static final int BLOCKS = 200_000;
    private static final int QUARTER = 50_000;

    private record Rec(List<Map.Entry<String, byte[]>> headers, byte[] value) {}

    private static String id(int block, int i) {
        return String.format("%08x%024x", block, i);
    }

    private static Rec up(int block, int i, int key) {
        return new Rec(RepeatsTest.update(id(block, i), "k" + key), RepeatsTest.value("k" + key, 8 * block + i));
    }

    /**
     * Block {@code b} of ten records: eight new events (updates of four ConfigMaps, and in every
     * hundredth block a full sync's markers around them), then two exact repeats of the latest
     * ones, close behind.
     */
    private static List<Rec> block(int b) {
        List<Rec> block = new ArrayList<>();
        if (b % 100 == 0) {
            String sync = "sync-" + b;
            Rec completed = new Rec(RepeatsTest.syncMarker(id(b, 5), "completed"), RepeatsTest.syncData(sync));
            block.addAll(List.of(new Rec(RepeatsTest.syncMarker(id(b, 0), "started"), RepeatsTest.syncData(sync)), up(b, 1, 0), up(b, 2, 1), up(b, 3, 2),
                    up(b, 4, 3), completed, completed, up(b, 6, 0), up(b, 7, 1)));
            block.add(block.get(8));
        } else {
            for (int i = 0; i < 8; i++) {
                block.add(up(b, i, i % 4));
            }
            block.add(block.get(6));
            block.add(block.get(7));
        }
        return block;
    }

    /**
     * 2,000,000 records through {@code kafkaRecord}: the heap once collected after the first
     * quarter and at the end differs by less than 2 MiB, with the default repeat window at the
     * same fill both times (800,000 new ids apart); every repeat is skipped and the state is the
     * last update of each ConfigMap. Measured: 31.3 MiB both times (-1 KiB), 15 s; with a window
     * that never drops an id (every id kept, as before the window) the heap grows from 59 to 199
     * MiB and the test fails.
     */
    @Test
    void millionsOfEventsKeepMemoryFlat() throws BadRecordException {
        long began = System.nanoTime();
        Consumer c = new Consumer(null, "c1");
        long atQuarter = 0;
        int windowAtQuarter = 0;
        for (int b = 0; b < BLOCKS; b++) {
            for (Rec r : block(b)) {
                c.kafkaRecord(0, r.headers(), r.value());
            }
            if (b + 1 == QUARTER) {
                atQuarter = RepeatsTest.heap();
                windowAtQuarter = c.windowed();
            }
        }
        long atEnd = RepeatsTest.heap();
        System.out.printf("%d events in %.1f s: heap %.1f MiB after the first quarter, %.1f MiB at the end (%+d KiB); %d ids in the window%n", 10 * BLOCKS,
                (System.nanoTime() - began) / 1e9, atQuarter / 1048576.0, atEnd / 1048576.0, (atEnd - atQuarter) >> 10, c.windowed());
        assertEquals(windowAtQuarter, c.windowed(), "the window is not at the same fill: the figures are not comparable");
        assertTrue(atEnd - atQuarter < 2L << 20, "the heap grew " + (atEnd - atQuarter) + " bytes from the first quarter to the end");
        assertEquals(2L * BLOCKS, c.duplicates());
        assertTrue(c.skipped().isEmpty(), c.skipped().toString());
        Map<String, ?> objects = c.state().get("v1/ConfigMap");
        assertEquals(4, objects.size());
        int last = 8 * (BLOCKS - 1);
        for (int k = 0; k < 4; k++) {
            assertEquals(Integer.toString(last + 4 + k), c.state().get("v1/ConfigMap").get("ns/k" + k).path("data").path("v").asText());
        }
    }
}
