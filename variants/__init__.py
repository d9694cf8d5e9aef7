"""The consumers and producers beyond the post. They import the post's files (consume.py,
publish.py) and one another (common.py above all), never the lab; the lab runs them
through lab/worker.py.

    consume_batched.py    d: the inbox for a whole batch in one transaction
    consume_pipelined.py  p: d in one statement a batch, the next batch decoded meanwhile
    consume_parallel.py   k: handlers on lanes, one key at a time, offsets at the watermark
    consume_offsets.py    o: the offsets kept in the inbox transaction
    consume_eos.py        e, f: Kafka's exactly-once loop, crediting Postgres
    consume_external.py   ext, outbox: an effect outside the database (provider.py)
    inbox_v7.py/.sql      the lean inbox: uuid keys, partitioned by time
    relay.py              the outbox relay, at least once
"""
