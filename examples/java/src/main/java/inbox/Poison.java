package inbox;

/** A message that no retry can fix: it is parked on the dead-letter topic with this reason. */
final class Poison extends Exception {
    private static final long serialVersionUID = 1L;

    Poison(String reason) {
        super(reason, null, false, false);  // a verdict on a message, not a failure: no stack trace
    }

    String reason() {
        return getMessage();
    }
}
