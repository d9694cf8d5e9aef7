package inbox;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The dead-letter topic, {@code <topic>.dlq}: a poison message is parked there with its key,
 * value and headers, plus {@code dlq_reason} and {@code dlq_source} (topic/partition/offset),
 * and {@link #park} returns only once the broker has acknowledged it, so the consumer may then
 * commit past it. One too large to park whole is parked as a reference (size and SHA-256).
 */
final class DeadLetters implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(DeadLetters.class);
    private static final long SEND_TIMEOUT_MS = 35_000;  // a little past delivery.timeout.ms
    private final String topic;
    private final KafkaProducer<byte[], byte[]> producer;

    DeadLetters(Settings settings, String sourceTopic) {
        this.topic = topicFor(sourceTopic);
        Map<String, Object> config = Map.of(
                ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, settings.brokers,
                ProducerConfig.CLIENT_ID_CONFIG, "dead-letters-java",
                // Acknowledged by every in-sync replica: "parked" must survive a broker's loss.
                ProducerConfig.ACKS_CONFIG, "all",
                // The client's own retries cannot write a letter twice.
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true,
                // How long one letter may take, retries included, before park() gives up (and the
                // consumer retries the record): its offset is not committed meanwhile.
                ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 30_000,
                ProducerConfig.LINGER_MS_CONFIG, 0,
                ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class,
                ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        this.producer = new KafkaProducer<>(config);
    }

    static String topicFor(String sourceTopic) {
        return sourceTopic + ".dlq";
    }

    /** Create the topic unless it exists (the lab's brokers do not auto-create), retrying while
     *  the broker cannot be reached. Replication factor: the broker's default. */
    static void ensureTopic(Settings settings, String sourceTopic, Lifecycle lifecycle) {
        String name = topicFor(sourceTopic);
        long delayMs = 500;
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, settings.brokers))) {
            while (lifecycle.running()) {
                try {
                    admin.createTopics(List.of(new NewTopic(name, Optional.of(1), Optional.empty())))
                            .all().get(30, TimeUnit.SECONDS);
                    log.info("created dead-letter topic {}", name);
                    return;
                } catch (ExecutionException e) {
                    if (e.getCause() instanceof TopicExistsException) {
                        return;
                    }
                    log.warn("cannot create dead-letter topic {}, retrying in {} ms: {}", name, delayMs,
                            Credit.firstLine(String.valueOf(e.getCause())));
                } catch (TimeoutException e) {
                    log.warn("cannot create dead-letter topic {}, retrying in {} ms: timed out", name, delayMs);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
                lifecycle.pause(delayMs);
                delayMs = Math.min(delayMs * 2, 5_000);
            }
        }
    }

    /** Park the record, waiting for the broker's acknowledgement; Unavailable if none came. */
    void park(ConsumerRecord<byte[], byte[]> record, String reason) throws Unavailable, InterruptedException {
        String where = record.topic() + "/" + record.partition() + "/" + record.offset();
        RecordHeaders headers = new RecordHeaders();
        for (Header header : record.headers()) {
            headers.add(header.key(), header.value());
        }
        headers.add("dlq_reason", reason.getBytes(StandardCharsets.UTF_8));
        headers.add("dlq_source", where.getBytes(StandardCharsets.UTF_8));
        try {
            send(new ProducerRecord<>(topic, null, record.key(), record.value(), headers));
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof RecordTooLargeException)) {
                throw new Unavailable("dead-letter topic refused " + where + ": " + e.getCause(), e);
            }
            RecordHeaders source = new RecordHeaders();
            source.add("dlq_reason", reason.getBytes(StandardCharsets.UTF_8));
            source.add("dlq_source", where.getBytes(StandardCharsets.UTF_8));
            try {
                send(new ProducerRecord<>(topic, null, (byte[]) null, reference(record), source));
            } catch (ExecutionException again) {
                throw new Unavailable("dead-letter topic refused " + where + ": " + again.getCause(), again);
            }
        }
    }

    private void send(ProducerRecord<byte[], byte[]> letter) throws ExecutionException, InterruptedException,
            Unavailable {
        try {
            producer.send(letter).get(SEND_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            throw new Unavailable("dead-letter topic did not answer in " + SEND_TIMEOUT_MS + " ms", e);
        }
    }

    /** Where the too-large original is, its size and digest, as JSON: enough to fetch and check it. */
    private static byte[] reference(ConsumerRecord<byte[], byte[]> record) {
        byte[] value = record.value() == null ? new byte[0] : record.value();
        String sha256;
        try {
            sha256 = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(value));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JVM has SHA-256", e);
        }
        int headers = record.headers().toArray().length;
        String json = "{\"parked_as\": \"reference\", \"bytes\": " + value.length + ", \"sha256\": \"" + sha256
                + "\", \"headers\": " + headers + "}";
        return json.getBytes(StandardCharsets.UTF_8);
    }

    @Override
    public void close() {
        producer.close(java.time.Duration.ofSeconds(10));
    }
}
