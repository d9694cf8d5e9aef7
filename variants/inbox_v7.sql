-- A leaner inbox for producers that send UUIDv7 event IDs. The ID carries the
-- millisecond it was made in its first 48 bits, and uuid order is byte order, so
-- "IDs older than a cutoff" is a primary-key range: retention needs neither a
-- processed_at column nor an index on it. One table per consumer replaces the
-- consumer column, so each row is just its 16-byte ID.
--
-- Range-partitioned by ID, one partition per UTC day: expiring a day is
-- dropping a table, with no dead tuples and almost no WAL.
--
-- IDs that are not version 7 never come here (their first bits are random, so
-- a range delete would forget them at random); handle_once_v7 in inbox_v7.py
-- sends them to the ordinary processed_messages table instead.

-- The smallest UUIDv7 of a given millisecond: every v7 ID made at or after ts
-- sorts at or above it.
CREATE OR REPLACE FUNCTION uuidv7_floor(ts timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM ts) * 1000)::bigint), 12, '0')
            || '70008000000000000000')::uuid
$$;

-- Create the inbox table for one consumer, partitioned by day (run by the schema's
-- owner, as all DDL is). Where roles.sql's roles exist they get what grants.sql gives
-- them on processed_messages: the consumer claims IDs, retention forgets them. Rows
-- reached through the partitioned table need no grant on the partitions.
CREATE OR REPLACE FUNCTION inbox_v7_create(inbox text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE TABLE IF NOT EXISTS %I (message_id uuid PRIMARY KEY) PARTITION BY RANGE (message_id)',
                   inbox);
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'inbox_consumer') THEN
        EXECUTE format('GRANT SELECT, INSERT ON %I TO inbox_consumer', inbox);
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'inbox_retention') THEN
        EXECUTE format('GRANT SELECT, DELETE ON %I TO inbox_retention', inbox);
    END IF;
END
$$;

-- Make sure a partition exists for every UTC day from first_day to last_day.
CREATE OR REPLACE FUNCTION inbox_v7_ensure_days(inbox text, first_day date, last_day date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day date;
    made integer := 0;
BEGIN
    FOR day IN SELECT generate_series(first_day, last_day, interval '1 day')::date LOOP
        IF to_regclass(format('%I', inbox || '_' || to_char(day, 'YYYYMMDD'))) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                           inbox || '_' || to_char(day, 'YYYYMMDD'), inbox,
                           uuidv7_floor(day::timestamp AT TIME ZONE 'UTC'),
                           uuidv7_floor((day + 1)::timestamp AT TIME ZONE 'UTC'));
            made := made + 1;
        END IF;
    END LOOP;
    RETURN made;
END
$$;

-- Forget whole days older than the cutoff: drop every partition that ends at or
-- before it. A day that straddles the cutoff stays until it is entirely past.
CREATE OR REPLACE FUNCTION inbox_v7_drop_before(inbox text, cutoff timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    part record;
    dropped integer := 0;
BEGIN
    FOR part IN
        SELECT c.relname, to_date(right(c.relname, 8), 'YYYYMMDD') AS day
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = to_regclass(format('%I', inbox))
    LOOP
        IF (part.day + 1)::timestamp AT TIME ZONE 'UTC' <= cutoff THEN
            EXECUTE format('DROP TABLE %I', part.relname);
            dropped := dropped + 1;
        END IF;
    END LOOP;
    RETURN dropped;
END
$$;
