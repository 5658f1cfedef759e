package dev.deltaship.consumer.jetstream;

import dev.deltaship.consumer.BadRecordException;
import dev.deltaship.consumer.Consumer;
import io.nats.client.Connection;
import io.nats.client.JetStreamManagement;
import io.nats.client.Nats;
import io.nats.client.api.MessageInfo;
import io.nats.client.impl.Headers;
import java.io.IOException;
import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;

/**
 * Reads a deltaship JetStream stream into a {@link Consumer} with the NATS client
 * ({@code io.nats:jnats}, an optional dependency: declare it, at the version you choose), to the
 * last message the stream had when reading started.
 */
public final class JetStreamReader {
    private JetStreamReader() {}

    /**
     * Every message of {@code stream}, in stream order, from {@link Consumer#position} (partition
     * 0: restored by {@link Consumer#resume}, or where a previous read ended; the first message
     * when there is none); {@link Consumer#advance} moves it past every message: read again to
     * follow.
     */
    public static void read(String url, String stream, Consumer consumer) throws IOException, InterruptedException {
        try (Connection nc = Nats.connect(url)) {
            JetStreamManagement jsm = nc.jetStreamManagement();
            var state = jsm.getStreamInfo(stream).getStreamState();
            long first = Math.max(1, state.getFirstSequence());
            OptionalLong start = consumer.position(stream, 0);
            if (start.isPresent() && start.getAsLong() < first) {
                throw new IllegalStateException("the position of stream " + stream + " is sequence " + start.getAsLong() + ", but the stream begins at " + first
                        + ": messages were deleted (limits) before they were read; rebuild from a new snapshot");
            }
            for (long seq = start.orElse(first); seq <= state.getLastSequence(); seq++) {
                MessageInfo m;
                try {
                    m = jsm.getMessage(stream, seq);
                } catch (io.nats.client.JetStreamApiException e) {
                    consumer.skip(stream + "#" + seq, new BadRecordException("missing", "no message at this sequence: " + e.getMessage()));
                    consumer.advance(stream, 0, seq + 1);
                    continue;
                }
                try {
                    consumer.natsMessage(pairs(m.getHeaders()), m.getData());
                } catch (BadRecordException e) {
                    consumer.skip(stream + "#" + seq, e);
                }
                consumer.advance(stream, 0, seq + 1);
            }
        } catch (io.nats.client.JetStreamApiException e) {
            throw new IllegalStateException("stream " + stream + ": " + e.getMessage(), e);
        }
    }

    private static List<Map.Entry<String, String>> pairs(Headers headers) {
        List<Map.Entry<String, String>> out = new ArrayList<>();
        if (headers != null) {
            for (String name : headers.keySet()) {
                for (String value : headers.get(name)) {
                    out.add(new AbstractMap.SimpleEntry<>(name, value));
                }
            }
        }
        return out;
    }
}
