package inbox;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * An idempotent Kafka consumer: the inbox pattern, in Java.
 *
 * <p>Claim: each credit is applied once however often Kafka delivers it. Its event ID goes into
 * {@code processed_messages} in the same Postgres transaction as the credit, the credit is applied
 * only if that insert claimed a new row, and the record's offset is committed only after the
 * transaction has. A crash replays at most the records whose offsets were not yet committed, and
 * each of those finds its row and is skipped. A poison message is parked on {@code <topic>.dlq}
 * (acknowledged) before its offset is committed; a lost database is waited for, the record in
 * hand retried, and no offset committed past it meanwhile.
 *
 * <p>Configured by the lab's "your consumer" environment (README.md beside this file).
 */
public record InboxConsumer(Settings settings, Lifecycle lifecycle, Database db) {

    static final String PROGRAM = "InboxConsumer";
    /** The inbox key's first half: each consumer remembers its own IDs. */
    static final String CONSUMER_NAME = "wallet-credits-java";
    private static final Logger log = LoggerFactory.getLogger(InboxConsumer.class);

    enum Outcome { APPLIED, SKIPPED, DEAD_LETTERED }


    public static void main(String[] args) {
        Lifecycle.main(PROGRAM, args, log, (settings, lifecycle) ->
            new InboxConsumer(settings, lifecycle, new Database(settings, PROGRAM, false)).run());  // explicit transactions
    }

    static Map<String, Object> consumerConfig(Settings settings) {
        Map<String, Object> config = Lifecycle.sharedConfig(settings, "inbox-consumer-java");
        // We commit, and only after Postgres has: an offset never gets ahead of a durable outcome.
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        return config;
    }

    /** The loop; returns the exit status (0 stopped as asked, 1 the setup is wrong). */
    private int run() {
        try {
            db.connectFirst(lifecycle);
            DeadLetters.ensureTopic(settings, settings.topic, lifecycle);
        } catch (Database.Fatal e) {
            log.error("{}", e.getMessage());
            return 1;
        }
        if (!lifecycle.running()) {
            return 0;  // stopped while waiting for the database or the broker
        }
        try (db;
             DeadLetters deadLetters = new DeadLetters(settings, settings.topic);
             KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerConfig(settings))) {
            lifecycle.watch(consumer);
            consumer.subscribe(List.of(settings.topic), lifecycle.partitionLog());
            log.info("consuming {} as group {} into schema {}", settings.topic, settings.group, settings.schema);
            consume(consumer, deadLetters);
            return 0;
        } catch (Database.Fatal e) {
            log.error("stopping, nothing committed past the record in hand: {}", e.getMessage());
            return 1;
        }
    }

    private void consume(KafkaConsumer<byte[], byte[]> consumer, DeadLetters deadLetters) {
        while (lifecycle.running()) {
            ConsumerRecords<byte[], byte[]> records;
            try {
                records = consumer.poll(Duration.ofMillis(500));
            } catch (WakeupException e) {
                return;  // the shutdown hook: nothing in hand
            } catch (KafkaException e) {
                log.warn("poll failed, polling again in 1s: {}", e.toString());
                lifecycle.pause(1_000);
                continue;
            }
            for (ConsumerRecord<byte[], byte[]> record : records) {
                Outcome outcome = handleUntilDurable(record, deadLetters);
                if (outcome == null) {
                    return;  // stopping while the record had no durable outcome: its offset stays
                }
                commitOffset(consumer, record);  // last, after the DB commit (or the DLQ's ack)
            }
        }
    }

    /** The record's durable outcome, retrying it while the database or the DLQ is unavailable;
     *  null if the consumer is stopped first. */
    private Outcome handleUntilDurable(ConsumerRecord<byte[], byte[]> record, DeadLetters deadLetters) {
        long delayMs = 200;
        while (lifecycle.running()) {
            try {
                return handle(record, deadLetters);
            } catch (Unavailable e) {
                log.warn(String.format("%s/%d/%d not handled, retrying in %.1fs: %s", record.topic(),
                        record.partition(), record.offset(), delayMs / 1000.0, e.getMessage()));
                lifecycle.pause(delayMs);
                delayMs = Math.min(delayMs * 2, 5_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return null;
            }
        }
        return null;
    }

    /** One record to a durable outcome, or Unavailable (nothing durable happened that matters:
     *  a transaction that did commit is found by the retry's inbox insert). */
    private Outcome handle(ConsumerRecord<byte[], byte[]> record, DeadLetters deadLetters)
            throws Unavailable, InterruptedException {
        Credit credit;
        try {
            credit = Credit.of(record);
        } catch (Poison poison) {
            return deadLetter(record, poison.reason(), deadLetters);
        }
        Connection conn = db.connection();
        try {
            if (!claim(conn, credit.eventId())) {
                conn.commit();  // nothing was written: end the transaction
                log.info("skipped duplicate {}", credit.eventId());
                return Outcome.SKIPPED;
            }
            apply(conn, credit);  // if this throws, the inbox row rolls back with the credit
            conn.commit();
            return Outcome.APPLIED;
        } catch (Poison poison) {
            db.rollback();
            return deadLetter(record, poison.reason(), deadLetters);
        } catch (SQLException e) {
            db.rollback();
            switch (Database.classify(e)) {
                case POISON:
                    return deadLetter(record, "the database refused it: " + Credit.firstLine(e.getMessage()),
                            deadLetters);
                case FATAL:
                    throw new Database.Fatal(e.getSQLState() + " " + Credit.firstLine(e.getMessage()), e);
                default:
                    db.dropIfBroken();
                    throw new Unavailable("database: " + e.getSQLState() + " " + Credit.firstLine(e.getMessage()), e);
            }
        }
    }

    /** True if this consumer has not seen the ID before (the row is now claimed, until commit or
     *  rollback). A concurrent handler of the same ID waits here until the first one ends. */
    private static boolean claim(Connection conn, String eventId) throws SQLException {
        try (PreparedStatement insert = conn.prepareStatement(
                "INSERT INTO processed_messages (consumer, message_id) VALUES (?, ?) ON CONFLICT DO NOTHING")) {
            insert.setString(1, CONSUMER_NAME);
            insert.setString(2, eventId);
            return insert.executeUpdate() == 1;
        }
    }

    /** The side effect. An increment: run twice, it credits twice; the inbox sees that it runs once. */
    static void apply(Connection conn, Credit credit) throws SQLException, Poison {
        try (PreparedStatement update = conn.prepareStatement(
                "UPDATE accounts SET balance = balance + ? WHERE id = ?")) {
            update.setLong(1, credit.amount());
            update.setInt(2, credit.accountId());
            if (update.executeUpdate() == 0) {  // a credit to no account is poison, not a silent no-op
                throw new Poison("unknown account " + credit.accountId());
            }
        }
        try (PreparedStatement insert = conn.prepareStatement(
                "INSERT INTO ledger (event_id, account_id, amount) VALUES (?, ?, ?)")) {
            insert.setString(1, credit.eventId());
            insert.setInt(2, credit.accountId());
            insert.setLong(3, credit.amount());
            insert.executeUpdate();
        }
    }

    private static Outcome deadLetter(ConsumerRecord<byte[], byte[]> record, String reason, DeadLetters deadLetters)
            throws Unavailable, InterruptedException {
        deadLetters.park(record, reason);  // returns once the broker has acknowledged it
        log.warn("dead-lettered {}/{}/{}: {}", record.topic(), record.partition(), record.offset(), reason);
        return Outcome.DEAD_LETTERED;
    }

    /** Commit the offset after the record, synchronously. A failure is logged, not raised: a
     *  rebalance took the partition, and its next owner (or this one, later) finds the inbox row. */
    private static void commitOffset(KafkaConsumer<byte[], byte[]> consumer, ConsumerRecord<byte[], byte[]> record) {
        Map<TopicPartition, OffsetAndMetadata> next = Map.of(
                new TopicPartition(record.topic(), record.partition()),
                new OffsetAndMetadata(record.offset() + 1, record.leaderEpoch(), ""));
        for (int attempt = 1; ; attempt++) {
            try {
                consumer.commitSync(next);
                return;
            } catch (WakeupException e) {
                if (attempt > 1) {
                    return;  // woken twice: the shutdown hook; the record is found in the inbox next time
                }
                // the shutdown hook woke us mid-commit: the outcome is durable, so commit it anyway
            } catch (KafkaException e) {  // CommitFailedException, RebalanceInProgressException, timeouts ...
                log.warn("offset commit failed: {} ({})", e.getClass().getSimpleName(),
                        Credit.firstLine(e.getMessage()));
                return;
            }
        }
    }
}
