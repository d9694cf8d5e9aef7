package inbox;

import java.util.Collection;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.utils.AppInfoParser;
import org.slf4j.Logger;

/**
 * What both consumers share around their loops: the command line (--version, nothing else),
 * a stop on SIGTERM or SIGINT that lets the record in hand finish, the group timeouts a harness
 * may set, and a log line whenever partitions change hands.
 */
final class Lifecycle {

    private final String program;
    private final Logger log;
    private final CountDownLatch finished = new CountDownLatch(1);
    private volatile boolean running = true;
    private volatile boolean exiting;  // main is leaving by System.exit: the hook must not wait or override
    private volatile int status;  // main's exit status, for the hook to exit with
    private volatile KafkaConsumer<?, ?> consumer;

    Lifecycle(String program, Logger log) {
        this.program = program;
        this.log = log;
    }

    /** `--version` prints one line and exits 0; any other argument is an error (exit 2). */
    static void handleArguments(String program, String[] args) {
        if (args.length == 1 && args[0].equals("--version")) {
            // the manifest's Implementation-Version: "1.0.0", or "1.0.0 built from <commit>" (pom.xml)
            String own = Lifecycle.class.getPackage().getImplementationVersion();
            String[] parts = (own == null ? "dev" : own).split(" (?=built from )", 2);
            System.out.println(program + " " + parts[0] + " (kafka-clients " + AppInfoParser.getVersion() + ")"
                    + (parts.length > 1 ? " " + parts[1] : ""));
            System.exit(0);
        }
        if (args.length > 0) {
            System.err.println(program + ": takes no arguments but --version; the environment configures it"
                    + " (KAFKA_BROKERS, KAFKA_TOPIC, KAFKA_GROUP, PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD,"
                    + " CONSUMER_SCHEMA)");
            System.exit(2);
        }
    }

    /** On SIGTERM/SIGINT: stop the loop, wake the consumer out of poll(), wait for the clean close. */
    void installShutdownHook() {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            if (exiting) {
                return;
            }
            running = false;
            log.info("stopping: the record in hand finishes, then the consumer leaves the group");
            KafkaConsumer<?, ?> c = consumer;
            if (c != null) {
                c.wakeup();
            }
            try {
                if (finished.await(30, TimeUnit.SECONDS) && !exiting) {
                    System.out.flush();
                    Runtime.getRuntime().halt(status);  // stopped as asked: 0, not the JVM's 143
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, program + "-shutdown"));
    }

    boolean running() {
        return running;
    }

    void watch(KafkaConsumer<?, ?> consumer) {
        this.consumer = consumer;
    }

    /** Main's last word, once everything is closed: exit with `status` (after a signal, the hook does). */
    void finish(int status) {
        this.status = status;
        boolean signalled = !running;
        if (!signalled) {
            exiting = true;  // a signal from now on finds the JVM already leaving
        }
        finished.countDown();
        if (!signalled) {
            System.out.flush();
            System.exit(status);
        }
    }

    /** Sleep that ends early (false) when the consumer is asked to stop. */
    boolean pause(long millis) {
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        while (running && System.nanoTime() < end) {
            try {
                Thread.sleep(Math.min(100, Math.max(1, TimeUnit.NANOSECONDS.toMillis(end - System.nanoTime()))));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }
        return running;
    }

    /** What both consumers run: the arguments, the environment, the SIGTERM hook, then `loop`. */
    static void main(String program, String[] args, Logger log,
                     java.util.function.BiFunction<Settings, Lifecycle, Integer> loop) {
        handleArguments(program, args);
        Settings settings = Settings.fromEnvironment(program);
        Lifecycle lifecycle = new Lifecycle(program, log);
        lifecycle.installShutdownHook();
        int status = loop.apply(settings, lifecycle);  // everything closed when it returns
        log.info("stopped, exit status {}", status);
        lifecycle.finish(status);
    }

    /**
     * The client config both consumers share: where to read, as whom, and the group timeouts. Each
     * consumer adds its own delivery keys: how, and when, its offsets are committed.
     */
    static Map<String, Object> sharedConfig(Settings settings, String clientId) {
        Map<String, Object> config = new java.util.HashMap<>();
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, settings.brokers);
        config.put(ConsumerConfig.GROUP_ID_CONFIG, settings.group);
        config.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        // A new group starts at the beginning; "latest" would skip what was published before it joined.
        config.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // Never apply a record of an aborted producer transaction (librdkafka's default, not Java's).
        config.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        // A small batch per poll: one DB transaction and one synchronous commit per record must
        // fit inside max.poll.interval.ms, which a harness may shorten to a few seconds.
        config.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 100);
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
                   org.apache.kafka.common.serialization.ByteArrayDeserializer.class);
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG,
                   org.apache.kafka.common.serialization.ByteArrayDeserializer.class);
        groupTimeouts(settings, config);  // session.timeout.ms, max.poll.interval.ms when set
        return config;
    }

    /** The group timeouts the harness shortens to provoke evictions; absent ones stay the client's. */
    static void groupTimeouts(Settings settings, Map<String, Object> config) {
        if (settings.groupProtocol != null) {
            config.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, settings.groupProtocol);
        }
        // Poll at most this long apart, or the member is deemed stuck and its partitions move.
        if (settings.maxPollIntervalMs != null) {
            config.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, settings.maxPollIntervalMs);
        }
        if ("consumer".equals(settings.groupProtocol)) {
            return;  // KIP-848: the session and heartbeat timeouts are the group's, set on the broker
        }
        // No heartbeat for this long and the coordinator evicts the member (classic protocol).
        if (settings.sessionTimeoutMs != null) {
            config.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, settings.sessionTimeoutMs);
        }
        // Heartbeats well inside the session: a third of it unless the harness says otherwise.
        if (settings.heartbeatIntervalMs != null) {
            config.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, settings.heartbeatIntervalMs);
        } else if (settings.sessionTimeoutMs != null) {
            config.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, Math.max(1, settings.sessionTimeoutMs / 3));
        }
    }

    /** Logs "partitions assigned|revoked|lost: 0,1" (the lab's format) as ownership changes. */
    ConsumerRebalanceListener partitionLog() {
        return new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                log.info("partitions assigned: {}", listed(partitions));
            }

            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                log.info("partitions revoked: {}", listed(partitions));
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> partitions) {
                log.info("partitions lost: {}", listed(partitions));
            }
        };
    }

    private static String listed(Collection<TopicPartition> partitions) {
        return partitions.isEmpty() ? "none"
                : partitions.stream().map(TopicPartition::partition).sorted().map(String::valueOf)
                        .collect(Collectors.joining(","));
    }
}
