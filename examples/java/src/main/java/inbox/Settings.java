package inbox;

import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Properties;

/**
 * The lab's "your consumer" contract, read from the environment: where to read (Kafka) and
 * where to write (the run's own schema in Postgres), and the group timeouts a harness may
 * shorten. A missing or malformed variable is reported on one stderr line, exit status 2.
 */
final class Settings {

    final String brokers;
    final String topic;
    final String group;
    final String pgHost;
    final int pgPort;
    final String pgDatabase;
    final String pgUser;
    final String pgPassword;
    final String schema;
    /** Optional group settings; null when the harness leaves the client's default. */
    final Integer sessionTimeoutMs;
    final Integer maxPollIntervalMs;
    final Integer heartbeatIntervalMs;
    final String groupProtocol;

    private Settings(Map<String, String> env) {
        brokers = required(env, "KAFKA_BROKERS");
        topic = required(env, "KAFKA_TOPIC");
        group = required(env, "KAFKA_GROUP");
        pgHost = required(env, "PGHOST");
        if (pgHost.startsWith("/")) {
            throw new BadSetting("PGHOST is a Unix socket directory (" + pgHost + "); the JDBC driver needs a host name");
        }
        pgPort = integer(env, "PGPORT", 1, 65535);
        pgDatabase = required(env, "PGDATABASE");
        pgUser = required(env, "PGUSER");
        pgPassword = present(env, "PGPASSWORD");  // may be empty (trust auth), but must be said
        schema = required(env, "CONSUMER_SCHEMA");
        sessionTimeoutMs = optionalInteger(env, "KAFKA_SESSION_TIMEOUT_MS");
        maxPollIntervalMs = optionalInteger(env, "KAFKA_MAX_POLL_INTERVAL_MS");
        heartbeatIntervalMs = optionalInteger(env, "KAFKA_HEARTBEAT_INTERVAL_MS");
        String protocol = env.getOrDefault("KAFKA_GROUP_PROTOCOL", "").trim().toLowerCase();
        if (!protocol.isEmpty() && !protocol.equals("classic") && !protocol.equals("consumer")) {
            throw new BadSetting("KAFKA_GROUP_PROTOCOL must be classic or consumer, not '" + protocol + "'");
        }
        groupProtocol = protocol.isEmpty() ? null : protocol;
    }

    /** The settings, or one line on stderr and exit status 2. */
    static Settings fromEnvironment(String program) {
        try {
            return new Settings(System.getenv());
        } catch (BadSetting e) {
            System.err.println(program + ": " + e.getMessage());
            System.exit(2);
            throw e;  // not reached
        }
    }

    /** jdbc:postgresql://PGHOST:PGPORT/PGDATABASE?currentSchema=CONSUMER_SCHEMA */
    String jdbcUrl() {
        String host = pgHost.contains(":") && !pgHost.startsWith("[") ? "[" + pgHost + "]" : pgHost;  // IPv6
        // Quoted, so that the schema is taken as one name whatever its case or characters.
        String quotedSchema = "\"" + schema.replace("\"", "\"\"") + "\"";
        return "jdbc:postgresql://" + host + ":" + pgPort + "/" + encode(pgDatabase)
                + "?currentSchema=" + encode(quotedSchema);
    }

    /** The driver's properties: credentials, and timeouts so that a dead server is noticed. */
    Properties jdbcProperties(String applicationName) {
        Properties props = new Properties();
        props.setProperty("user", pgUser);
        props.setProperty("password", pgPassword);
        props.setProperty("ApplicationName", applicationName);
        props.setProperty("connectTimeout", "10");  // seconds
        // A statement with no answer for a minute counts as a broken connection: the consumer
        // reconnects and retries the record, and the inbox row says whether it had committed.
        props.setProperty("socketTimeout", "60");
        props.setProperty("tcpKeepAlive", "true");
        return props;
    }

    private static String encode(String s) {
        return URLEncoder.encode(s, StandardCharsets.UTF_8).replace("+", "%20");
    }

    private static String present(Map<String, String> env, String name) {
        String value = env.get(name);
        if (value == null) {
            throw new BadSetting(name + " is not set");
        }
        return value;
    }

    private static String required(Map<String, String> env, String name) {
        String value = present(env, name).trim();
        if (value.isEmpty()) {
            throw new BadSetting(name + " is empty");
        }
        return value;
    }

    private static int integer(Map<String, String> env, String name, int low, int high) {
        String text = required(env, name);
        try {
            int value = Integer.parseInt(text);
            if (value < low || value > high) {
                throw new BadSetting(name + " must be in " + low + ".." + high + ", not " + value);
            }
            return value;
        } catch (NumberFormatException e) {
            throw new BadSetting(name + " must be an integer, not '" + text + "'");
        }
    }

    private static Integer optionalInteger(Map<String, String> env, String name) {
        String value = env.get(name);
        if (value == null || value.isBlank()) {
            return null;
        }
        return integer(env, name, 1, Integer.MAX_VALUE);
    }

    /** A variable that is missing or cannot be used. */
    static final class BadSetting extends RuntimeException {
        private static final long serialVersionUID = 1L;

        BadSetting(String message) {
            super(message);
        }
    }
}
