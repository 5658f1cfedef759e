package dev.deltaship.consumer;

import java.util.HashSet;
import java.util.Set;

/**
 * The latest event ids, to skip repeats in memory that does not grow with the stream. The
 * event contract's repeat is exact (same id, same content) and never arrives after a newer
 * event of the same key: a {@link Consumer} skips an event that is the last of its object, or of
 * its marker scope, while it holds that, or one of the latest ids remembered here. Two
 * generations of at most {@code size} ids each: when the current one is full it becomes the
 * previous one and the oldest is dropped, so the latest {@code size} ids are always remembered
 * and never more than {@code 2 * size}.
 */
final class Repeats {
    /**
     * How many of the latest ids a consumer remembers by default: the most events deltaship keeps
     * unacknowledged on a route ({@code delivery.max_in_flight} at its maximum). A repeat on Kafka
     * (a route without transactions, through a broker restart) is a re-send of one of those, so
     * fewer come between it and its original.
     */
    static final int DEFAULT_WINDOW = 100_000;

    private final int size;
    private Set<String> current = new HashSet<>();
    private Set<String> previous = new HashSet<>();

    Repeats(int size) {
        if (size < 1) {
            throw new IllegalArgumentException("a repeat window of " + size + " ids remembers nothing; give at least 1");
        }
        this.size = size;
    }

    boolean has(String id) {
        return current.contains(id) || previous.contains(id);
    }

    void add(String id) {
        if (current.size() >= size) {
            previous = current;
            current = new HashSet<>();
        }
        current.add(id);
    }

    /** The previous generation (for a snapshot). */
    Set<String> previous() {
        return previous;
    }

    /** The current generation (for a snapshot). */
    Set<String> current() {
        return current;
    }

    /** Takes back the generations a snapshot kept. */
    void restore(Set<String> previous, Set<String> current) {
        this.previous = previous;
        this.current = current;
    }

    int size() {
        return current.size() + previous.size();
    }
}
