"""The consumers and producers beyond the post, and the post's own as the lab runs them. They
import the post's files (consume.py, publish.py) and one another (common.py above all), never
the lab (`make lint` checks it); the lab runs them through lab/worker.py.

A variant is one file. The file declares what it runs in a module-level VARIANTS literal
(lab/registry.py lists the fields: a label, its kind, the flags it reads, its schema set-up,
its environment) and defines the function named there, run_worker(lab) by default, which
runs until lab.stop is set. `lab` is what the worker gives every variant:

    lab.args            the parsed flags: topic, group, batch, connections, lanes, work_ms, ...
    lab.stop            a threading.Event: set on SIGTERM
    lab.overrides       the librdkafka settings the harness chose (timeouts, group protocol)
    lab.apply(conn, event_id, event)   the credit, after the handler's work and stall, saying
                        the first effect (what consume.run's `apply` takes)
    lab.work(credits)   the handler's work and stalls alone, for (event_id, event) pairs
    lab.first_effect(event_id)         say the first effect, once, for a variant that
                        credits by other means
    lab.after_db_commit(msg, outcome), lab.committed(event_ids)   the planted crash point,
                        right after a database commit (consume.run's hook, and a batch's)
    lab.once_every(n, table), lab.crash(...), lab.crash_at(point, event_id)   planted crashes
                        at a variant's own points
    lab.supervised(run_once)           restart a loop that stopped on a lost database
    lab.log             the logger whose lines the harness reads

Nothing else has to change to add one: the measurements ask the registry for the variants
that fit, and a results file records the file each run loaded. `python -m lab.registry` lists
every variant with the file that declares it and its label, read from the files themselves.
"""
