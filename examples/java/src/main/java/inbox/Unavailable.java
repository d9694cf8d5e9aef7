package inbox;

/**
 * The record's outcome could not be made durable now: the database or the dead-letter topic
 * did not answer. The consumer backs off and handles the same record again, its offset uncommitted.
 */
final class Unavailable extends Exception {
    private static final long serialVersionUID = 1L;

    Unavailable(String message, Throwable cause) {
        super(message, cause);
    }
}
