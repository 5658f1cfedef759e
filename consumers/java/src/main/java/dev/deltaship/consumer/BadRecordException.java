package dev.deltaship.consumer;

/**
 * A record the protocol cannot apply; the state is left as it was. {@link #reason()} is one
 * of vectors/README.md's: empty, too_large, not_json, truncated, too_deep,
 * missing_attribute, wrong_type, patch_not_applied.
 */
public class BadRecordException extends Exception {
    private static final long serialVersionUID = 1L;

    private final String reason;

    public BadRecordException(String reason, String problem) {
        super(reason + ": " + problem);
        this.reason = reason;
    }

    /** Why the record was skipped: a bounded set, counted per reason. */
    public String reason() {
        return reason;
    }
}
