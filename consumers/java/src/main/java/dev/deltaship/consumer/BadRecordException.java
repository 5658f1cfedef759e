package dev.deltaship.consumer;

/** A record the protocol cannot apply; the state is left as it was. */
public class BadRecordException extends Exception {
    private static final long serialVersionUID = 1L;

    public BadRecordException(String message) {
        super(message);
    }

    public BadRecordException(String message, Throwable cause) {
        super(message, cause);
    }
}
