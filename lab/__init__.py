"""The lab: the machinery the measurements share, along Jepsen's seams.

    stack/        start, stop, status and fetch the embedded Kafka and PostgreSQL; cluster.py the replicated lab
    registry.py   every variant, read from the VARIANTS each file of variants/ declares
    worker.py     one variant per process, so a harness can kill it
    instruments.py  the lab's own workers: the ceilings (raw, db, db-d) and the publisher
    space.py      a run's own schema, topic and group; the workload; what Kafka and Postgres hold after
    harness.py    workers (a variant's, or a command's: command.py); recovery; what the logs say
    faults/       every fault, one file each (or a family's), found by discovery; schedule.py
    nemesis.py    what is done to a process that is no fault: the kill schedule, stalls, pauses
    pgproxy.py    the Postgres wire proxy that drops a commit's reply (lost-commit-reply)
    netlab.py     network namespaces and a relay for the partition faults
    provenance.py what a run loaded: the checkout's files its processes opened, hashed
    checker.py    pure: (published IDs, effects) -> duplicates, lost, the balance check
    results.py    results files, provenance, the one driver loop
    report.py     fills the pages' tables (tables.py, sections.py, overview.py) and figures (figures.py);
                  claims.py the post's claims table; charts.py the charts
    publishing.py the lab's producers: ready before the first timed send, counted, journaled
    settings.py   every address and role, from the environment
    cli.py        the flags every measurement shares
    layouts.py    M4's inbox layouts; retention.py the cron job that runs retention.sql
    roles.sql, grants.sql, pom.xml   least-privilege roles, their grants, Kafka's classpath

Imports run one way: the lab imports the post's files and variants/, never the reverse
(`make lint` checks it).
"""
