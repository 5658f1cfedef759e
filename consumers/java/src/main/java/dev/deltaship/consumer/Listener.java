package dev.deltaship.consumer;

import com.fasterxml.jackson.databind.JsonNode;

/** What a {@link Consumer} tells as the state changes. Override what you need. */
public interface Listener {
    /** An object stored or replaced; {@code resource} is {@code <apiVersion>/<Kind>}. */
    default void upsert(String resource, String key, JsonNode object) {}

    /** An object removed, by a delete event or by a full sync's completed marker. */
    default void delete(String resource, String key) {}

    /** A full sync of {@code resource} (in {@code namespace}, or all when null) was completed. */
    default void synced(String resource, String namespace) {}
}
