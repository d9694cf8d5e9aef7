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
