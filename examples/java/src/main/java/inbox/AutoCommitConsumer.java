package inbox;

import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The control that must fail: a Kafka consumer with the client's defaults and no inbox.
 *
 * <p>Claim: killed, it credits twice. The client commits offsets by itself, once a second, from
 * inside poll(); each credit is applied at once, in its own autocommitted statements. A SIGKILL
 * lands up to a second after the last commit, and every credit applied since is delivered and
 * applied again by the next owner. Nothing here remembers an event ID, so nothing can notice.
 *
 * <p>Poison is logged and dropped (no dead-letter topic: this is the control, not a model).
 * Configured by the lab's "your consumer" environment (README.md beside this file).
 */
public record AutoCommitConsumer(Settings settings, Lifecycle lifecycle, Database db) {

    static final String PROGRAM = "AutoCommitConsumer";
    private static final Logger log = LoggerFactory.getLogger(AutoCommitConsumer.class);


    public static void main(String[] args) {
        Lifecycle.main(PROGRAM, args, log, (settings, lifecycle) ->
            new AutoCommitConsumer(settings, lifecycle, new Database(settings, PROGRAM, true)).run());  // each statement commits by itself
    }

    static Map<String, Object> consumerConfig(Settings settings) {
        Map<String, Object> config = Lifecycle.sharedConfig(settings, "auto-commit-consumer-java");
        // The client commits what poll() handed out, on its own schedule: the flaw under test.
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, true);
        // ...once a second (the client's default is 5 s): a kill replays up to a second of credits.
        config.put(ConsumerConfig.AUTO_COMMIT_INTERVAL_MS_CONFIG, 1_000);
        return config;
    }

    private int run() {
        try {
            db.connectFirst(lifecycle);
        } catch (Database.Fatal e) {
            log.error("{}", e.getMessage());
            return 1;
        }
        if (!lifecycle.running()) {
            return 0;  // stopped while waiting for the database or the broker
        }
        try (db; KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerConfig(settings))) {
            lifecycle.watch(consumer);
            consumer.subscribe(List.of(settings.topic), lifecycle.partitionLog());
            log.info("consuming {} as group {} into schema {} (auto-commit, no inbox)", settings.topic,
                    settings.group, settings.schema);
            consume(consumer);
            return 0;  // close() auto-commits the positions: every record up to them was handled
        } catch (Database.Fatal e) {
            log.error("stopping: {}", e.getMessage());
            return 1;
        }
    }

    private void consume(KafkaConsumer<byte[], byte[]> consumer) {
        while (lifecycle.running()) {
            ConsumerRecords<byte[], byte[]> records;
            try {
                records = consumer.poll(Duration.ofMillis(500));  // commits the last batch's offsets, when due
            } catch (WakeupException e) {
                return;
            } catch (KafkaException e) {
                log.warn("poll failed, polling again in 1s: {}", e.toString());
                lifecycle.pause(1_000);
                continue;
            }
            // The first unhandled offset of each partition in this batch, for a stop mid-batch.
            Map<TopicPartition, Long> next = new HashMap<>();
            for (TopicPartition partition : records.partitions()) {
                next.put(partition, records.records(partition).get(0).offset());
            }
            for (ConsumerRecord<byte[], byte[]> record : records) {
                boolean handled;
                try {
                    handled = handleUntilDone(record);
                } catch (Database.Fatal e) {
                    rewind(consumer, next);
                    throw e;
                }
                if (handled) {
                    next.put(new TopicPartition(record.topic(), record.partition()), record.offset() + 1);
                }
                if (!handled || !lifecycle.running()) {
                    rewind(consumer, next);
                    return;
                }
            }
        }
    }

    /** Put each partition back at its first unhandled record, so that close()'s auto-commit does not
     *  commit past it: a clean stop loses nothing here, and only a kill shows the control's flaw. */
    private static void rewind(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, Long> next) {
        next.forEach(consumer::seek);
    }

    /** Apply the credit, retrying while the database is unavailable; poison is logged and dropped.
     *  False if the consumer was stopped while the record waited (it is not handled). */
    private boolean handleUntilDone(ConsumerRecord<byte[], byte[]> record) {
        Credit credit;
        try {
            credit = Credit.of(record);
        } catch (Poison poison) {
            log.warn("dropped poison {}/{}/{}: {}", record.topic(), record.partition(), record.offset(),
                    poison.reason());
            return true;
        }
        long delayMs = 200;
        while (true) {
            try {
                Connection conn = db.connection();
                InboxConsumer.apply(conn, credit);  // two statements, each committed on its own
                return true;
            } catch (Poison poison) {
                log.warn("dropped poison {}/{}/{}: {}", record.topic(), record.partition(), record.offset(),
                        poison.reason());
                return true;
            } catch (SQLException e) {
                switch (Database.classify(e)) {
                    case POISON:
                        log.warn("dropped poison {}/{}/{}: the database refused it: {}", record.topic(),
                                record.partition(), record.offset(), Credit.firstLine(e.getMessage()));
                        return true;
                    case FATAL:
                        throw new Database.Fatal(e.getSQLState() + " " + Credit.firstLine(e.getMessage()), e);
                    default:
                        db.dropIfBroken();
                        log.warn(String.format("%s/%d/%d not applied, retrying in %.1fs: %s %s", record.topic(),
                                record.partition(), record.offset(), delayMs / 1000.0, e.getSQLState(),
                                Credit.firstLine(e.getMessage())));
                }
            } catch (Unavailable e) {
                log.warn(String.format("%s/%d/%d not applied, retrying in %.1fs: %s", record.topic(),
                        record.partition(), record.offset(), delayMs / 1000.0, e.getMessage()));
            }
            if (!lifecycle.pause(delayMs)) {
                return false;
            }
            delayMs = Math.min(delayMs * 2, 5_000);
        }
    }
}
