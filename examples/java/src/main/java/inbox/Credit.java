package inbox;

import com.fasterxml.jackson.core.JacksonException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/**
 * One credit as a message carries it: the producer's event ID from the {@code event_id} header
 * and {@code {"account_id": int, "amount": int}} as the value. Anything else is poison, with a
 * reason that says what is wrong; no retry can fix a message, so it is parked, never retried.
 */
record Credit(String eventId, int accountId, long amount) {

    /** Far above any UUID; a B-tree entry (the inbox's primary key) has a hard size limit. */
    static final int MAX_EVENT_ID_BYTES = 512;
    private static final BigInteger MAX_ACCOUNT = BigInteger.valueOf(Integer.MAX_VALUE);
    private static final BigInteger MAX_AMOUNT = BigInteger.ONE.shiftLeft(53);  // the sum stays in bigint
    private static final ObjectMapper JSON = new ObjectMapper()
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);  // "{...} junk" is not a credit

    /** The credit a record carries, or Poison saying why it carries none. */
    static Credit of(ConsumerRecord<byte[], byte[]> record) throws Poison {
        String eventId = eventIdOf(record);
        JsonNode event = parse(record.value());
        int accountId = integerField(event, "account_id", BigInteger.ONE, MAX_ACCOUNT).intValueExact();
        long amount = integerField(event, "amount", BigInteger.ONE, MAX_AMOUNT).longValueExact();
        return new Credit(eventId, accountId, amount);
    }

    /** The producer's ID, never the offset: a republished copy of an event gets a new offset. */
    static String eventIdOf(ConsumerRecord<byte[], byte[]> record) throws Poison {
        byte[] raw = null;
        int seen = 0;
        for (Header header : record.headers().headers("event_id")) {
            raw = header.value();
            seen++;
        }
        if (seen > 1) {
            throw new Poison("more than one event_id header: which one to dedup on?");
        }
        if (raw == null || raw.length == 0) {
            throw new Poison("no event_id header (missing, empty or not UTF-8)");
        }
        String eventId;
        try {
            eventId = StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(raw))
                    .toString();
        } catch (CharacterCodingException e) {
            throw new Poison("no event_id header (missing, empty or not UTF-8)");
        }
        if (eventId.indexOf('\0') >= 0) {
            throw new Poison("event_id contains a NUL byte, which Postgres text cannot hold");
        }
        if (raw.length > MAX_EVENT_ID_BYTES) {
            throw new Poison("event_id is longer than " + MAX_EVENT_ID_BYTES + " bytes");
        }
        return eventId;
    }

    private static JsonNode parse(byte[] value) throws Poison {
        if (value == null) {
            throw new Poison("value is empty");
        }
        JsonNode event;
        try {
            event = JSON.readTree(value);  // also refuses nesting and numbers past Jackson's limits
        } catch (JacksonException e) {
            throw new Poison("value is not JSON: " + firstLine(e.getOriginalMessage()));
        } catch (java.io.IOException e) {
            throw new Poison("value is not JSON: " + firstLine(e.getMessage()));
        }
        if (event == null || event.isMissingNode()) {
            throw new Poison("value is not JSON: it is empty");
        }
        if (!event.isObject()) {
            throw new Poison("value is JSON " + event.getNodeType().name().toLowerCase() + ", not an object");
        }
        return event;
    }

    private static BigInteger integerField(JsonNode event, String name, BigInteger low, BigInteger high)
            throws Poison {
        JsonNode field = event.get(name);
        if (field == null) {
            throw new Poison("event has no " + name);
        }
        if (!field.isIntegralNumber()) {  // 1.0, "1", true and null are not integers
            String got = field.isValueNode() ? field.toString() : field.getNodeType().name().toLowerCase();
            throw new Poison(name + " must be an integer, got " + (got.length() > 40 ? got.substring(0, 40) + "..." : got));
        }
        BigInteger value = field.bigIntegerValue();
        if (value.compareTo(low) < 0 || value.compareTo(high) > 0) {
            throw new Poison(name + " " + value + " is outside " + low + ".." + high);
        }
        return value;
    }

    /** An error's message for a log line or a dead letter's reason: its first line, never empty. */
    static String firstLine(String message) {
        if (message != null) {
            for (String line : message.split("\\R")) {
                if (!line.isBlank()) {
                    return line.strip();
                }
            }
        }
        return "(no message)";
    }
}
