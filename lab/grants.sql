-- What each role may do with schema.sql's tables, in the schema first on the
-- search path. Run by the owner, right after schema.sql (harness.create_schema
-- does both). roles.sql makes the roles.
DO $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO inbox_consumer, inbox_retention, inbox_provider, inbox_publisher',
                   current_schema());
END
$$;

-- The consumer claims IDs (INSERT ... RETURNING reads what it inserted), credits
-- accounts, records external effects, queues outbox rows and relays them (the relay
-- locks and marks its rows). No DELETE or TRUNCATE anywhere, and it owns nothing, so
-- no DDL: it cannot forget what it has seen.
GRANT SELECT, INSERT ON processed_messages TO inbox_consumer;
GRANT SELECT, UPDATE ON accounts TO inbox_consumer;
GRANT INSERT ON ledger TO inbox_consumer;
GRANT SELECT, INSERT, UPDATE ON external_effects TO inbox_consumer;
GRANT SELECT, INSERT, UPDATE ON outbox TO inbox_consumer;
GRANT SELECT, INSERT, UPDATE ON consumer_offsets TO inbox_consumer;

-- Retention forgets IDs past the window (its DELETE reads processed_at to choose
-- them) and does nothing else: no accounts, no ledger.
GRANT SELECT, DELETE ON processed_messages TO inbox_retention;

-- The publisher writes events beside its own changes and relays them (relay.py): it
-- claims unpublished rows and marks them published. It never reads the consumer's tables.
GRANT SELECT, INSERT, UPDATE ON events_outbox TO inbox_publisher;
