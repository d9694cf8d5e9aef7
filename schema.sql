-- The inbox: one row for every message a consumer has finished with. The
-- primary key is what makes a second delivery harmless: a second INSERT of the
-- same (consumer, message_id) finds the row and claims nothing.
CREATE TABLE IF NOT EXISTS processed_messages (
    consumer     text        NOT NULL,  -- scopes the IDs: each consumer dedups on its own
    message_id   text        NOT NULL,  -- the producer's event ID, never a Kafka offset
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);

-- The demo's side effect: crediting a wallet.
CREATE TABLE IF NOT EXISTS accounts (
    id      integer PRIMARY KEY,
    balance bigint  NOT NULL DEFAULT 0
);

-- One row per credit applied. event_id is deliberately NOT unique: a consumer
-- without the inbox writes a second row on redelivery, and the harnesses count
-- those rows to measure duplicates.
CREATE TABLE IF NOT EXISTS ledger (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id   text        NOT NULL,
    account_id integer     NOT NULL REFERENCES accounts (id),
    amount     bigint      NOT NULL,
    -- clock_timestamp(), not now(): the throughput harness times the gap
    -- between successive credits, and now() is frozen for a whole transaction.
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS ledger_event_id ON ledger (event_id);

-- Side effects outside the database (consume_external.py). No transaction can
-- hold an HTTP call and its record together, so the record has two states, and a
-- lease says how long a handler may take before another may try again.
CREATE TABLE IF NOT EXISTS external_effects (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    state        text        NOT NULL CHECK (state IN ('processing', 'done')),
    locked_until timestamptz,           -- NULL once done
    attempts     integer     NOT NULL DEFAULT 1,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);

-- Inbox, then outbox: a call that a relay still has to make, written in the
-- same transaction as the inbox row.
CREATE TABLE IF NOT EXISTS outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE,
    payload         jsonb       NOT NULL,
    sent_at         timestamptz
);
CREATE INDEX IF NOT EXISTS outbox_unsent ON outbox (id) WHERE sent_at IS NULL;

-- Variant o (consume_offsets.py): each partition's next offset, written in the
-- same transaction as the inbox row and the credit, and read back on every
-- assignment and reconnect. A database that forgets a transaction forgets its
-- offset with it, and the consumer reads that message again.
CREATE TABLE IF NOT EXISTS consumer_offsets (
    consumer    text    NOT NULL,
    topic       text    NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint  NOT NULL,
    PRIMARY KEY (consumer, topic, partition)
);

-- The producer's side (relay.py): an event written in the same transaction as the
-- change it announces, then published to Kafka by a relay, which marks it
-- published only once the broker has acknowledged it. A relay that dies between
-- the two publishes it again, under the same event_id.
CREATE TABLE IF NOT EXISTS events_outbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id     text        NOT NULL UNIQUE,
    topic        text        NOT NULL,
    key          text        NOT NULL,
    payload      jsonb       NOT NULL,
    published_at timestamptz
);
CREATE INDEX IF NOT EXISTS events_outbox_unpublished ON events_outbox (id) WHERE published_at IS NULL;
