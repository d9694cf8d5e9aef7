-- Who may do what, made once per database by its superuser (stack.py up; the
-- docker-compose init). Each role logs in with a password, stored as SCRAM (the
-- server's password_encryption), and nothing on 127.0.0.1 is trusted without one.
--
--   inbox_owner      owns every schema object and runs the DDL: schema.sql,
--                    grants.sql, migrations; the harnesses and tests set up and
--                    read their per-run schemas as this role
--   inbox_consumer   consume.py, consume_batched.py, consume_external.py: what
--                    their transactions need, and no DELETE, TRUNCATE or DDL, so
--                    it cannot forget an ID it has seen (grants.sql)
--   inbox_retention  retention.py: forgets IDs past the window, touches nothing else
--   inbox_provider   provider.py: its own two tables
--   inbox_publisher  relay.py: the producer's outbox (events_outbox), nothing else
-- The passwords are the role names: this is a lab on loopback; set your own.
DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['inbox_owner', 'inbox_consumer', 'inbox_retention', 'inbox_provider',
                                  'inbox_publisher'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = name) THEN
            EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L', name, name);
        END IF;
    END LOOP;
    -- The owner makes the schemas; the others only connect.
    EXECUTE format('GRANT CONNECT, CREATE ON DATABASE %I TO inbox_owner', current_database());
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO inbox_consumer, inbox_retention, inbox_provider, '
                   'inbox_publisher',
                   current_database());
END
$$;

-- The owner may also set up the default schema, for a reader who runs consume.py as it is:
--   psql "$ADMIN_DSN" -f schema.sql -f grants.sql
GRANT CREATE ON SCHEMA public TO inbox_owner;

-- The owner watches the others (lock waits in pg_stat_activity, as the tests do) and
-- may shorten its own deadlock_timeout (the tests force a real deadlock).
GRANT pg_read_all_stats TO inbox_owner;
GRANT SET ON PARAMETER deadlock_timeout TO inbox_owner;

-- and may force a checkpoint: measure_throughput's inbox-growth runs settle a freshly
-- filled inbox (gigabytes of WAL) with one, so no run starts inside the fill's checkpoint.
GRANT pg_checkpoint TO inbox_owner;

-- A consumer frozen inside a transaction (a GC pause, a stopped VM) keeps its inbox rows
-- locked, and the member the group gives its partitions to waits on those locks for as long
-- as the freeze lasts (M10's pause-consumer; docs/faults-more.md). The server ends such a
-- transaction after a minute: far longer than any handler here spends inside one (M2's
-- stalled handler, the longest, 12 s), short enough that a partition waits a minute at most,
-- not until TCP keepalive notices a dead host. Nothing is lost by it: the transaction rolls
-- back, its offset was never committed, and the new owner applies the message once.
-- Not lock_timeout or statement_timeout: those fail the *waiting* statement, which no
-- consumer retries, turning every such wait into a crash and a restart.
ALTER ROLE inbox_consumer SET idle_in_transaction_session_timeout = '60s';
