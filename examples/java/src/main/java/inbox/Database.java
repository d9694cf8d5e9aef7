package inbox;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The consumer's one Postgres connection, and what an error from it means. A data or integrity
 * error is the message's fault (poison); a wrong password, role, database, privilege or table is
 * the setup's (fatal: stop, commit nothing); anything else, a lost connection above all, is
 * transient: drop the connection, back off, reconnect and try the same record again.
 */
final class Database implements AutoCloseable {

    enum Verdict { POISON, FATAL, TRANSIENT }

    /** The setup is wrong: no retry will help, and no offset may move past the record in hand. */
    static final class Fatal extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Fatal(String message, Throwable cause) {
            super(message, cause);
        }
    }

    private static final Logger log = LoggerFactory.getLogger(Database.class);
    private final Settings settings;
    private final String applicationName;
    private final boolean autoCommit;
    private Connection connection;
    private long brokenSince;  // System.nanoTime() when the last connection was dropped; 0 if none was

    Database(Settings settings, String applicationName, boolean autoCommit) {
        this.settings = settings;
        this.applicationName = applicationName;
        this.autoCommit = autoCommit;
    }

    /** SQLSTATE classes (the first two characters) and what they say about a record. */
    static Verdict classify(SQLException e) {
        String state = e.getSQLState();
        String kind = state == null || state.length() < 2 ? "" : state.substring(0, 2);
        switch (kind) {
            case "22":  // data exception: a value the column cannot hold
            case "23":  // integrity constraint violation: a row the schema refuses
                return Verdict.POISON;
            case "28":  // invalid authorization: wrong user or password
            case "3D":  // invalid catalog name: no such database
            case "3F":  // invalid schema name
            case "42":  // syntax error or access rule violation: no privilege, no such table
                return Verdict.FATAL;
            default:  // 08 connection lost, 57P01 server shutting down, 40P01 deadlock, 53300 too many ...
                return Verdict.TRANSIENT;
        }
    }

    /** The first connection, waited for while the server refuses it (starting, restarting, full). */
    void connectFirst(Lifecycle lifecycle) {
        long delayMs = 200;
        while (lifecycle.running()) {
            try {
                connection();
                return;
            } catch (Unavailable e) {
                log.warn(String.format("database refused the first connection, retrying in %.1fs: %s",
                        delayMs / 1000.0, Credit.firstLine(e.getCause().getMessage())));
                lifecycle.pause(delayMs);
                delayMs = Math.min(delayMs * 2, 5_000);
            }
        }
    }

    /** The open connection, or a new one; Fatal if the setup refuses it, Unavailable if the server does. */
    Connection connection() throws Unavailable {
        if (connection != null) {
            return connection;
        }
        try {
            Connection fresh = DriverManager.getConnection(settings.jdbcUrl(), settings.jdbcProperties(applicationName));
            fresh.setAutoCommit(autoCommit);
            connection = fresh;
        } catch (SQLException e) {
            if (classify(e) == Verdict.FATAL) {
                throw new Fatal("database refused the connection for good: " + Credit.firstLine(e.getMessage()), e);
            }
            throw new Unavailable("cannot connect: " + Credit.firstLine(e.getMessage()), e);
        }
        if (brokenSince != 0) {
            log.warn(String.format("database reconnected after %.1fs", (System.nanoTime() - brokenSince) / 1e9));
            brokenSince = 0;
        }
        return connection;
    }

    /** End a failed transaction; if even that fails, the connection is gone: drop it. */
    void rollback() {
        if (connection == null || autoCommit) {
            return;
        }
        try {
            connection.rollback();
        } catch (SQLException e) {
            drop();
        }
    }

    /** After a transient error: keep the connection only if it still answers. */
    void dropIfBroken() {
        try {
            if (connection != null && !connection.isValid(2)) {
                drop();
            }
        } catch (SQLException e) {
            drop();
        }
    }

    void drop() {
        if (connection != null) {
            try {
                connection.close();
            } catch (SQLException ignored) {
                // it was broken already
            }
            connection = null;
            brokenSince = System.nanoTime();
        }
    }

    @Override
    public void close() {
        drop();
    }
}
