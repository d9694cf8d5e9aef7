-- Retention for the inbox. An ID may be forgotten only once no sender can hand
-- the same message over again (see README, "How long to remember IDs").

-- Run once: without it, each cleanup batch scans the whole table.
CREATE INDEX IF NOT EXISTS processed_messages_processed_at
    ON processed_messages (processed_at);

-- Run from cron, again and again until it reports DELETE 0. Deleting in
-- bounded batches keeps each transaction's locks and WAL short.
DELETE FROM processed_messages
WHERE ctid IN (
    SELECT ctid
    FROM processed_messages
    WHERE processed_at < now() - interval '14 days'
    LIMIT 10000
);
