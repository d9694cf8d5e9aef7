"""The lab: the machinery the measurements share, along Jepsen's seams.

    stack.py      start, stop, status and fetch the embedded Kafka and PostgreSQL (no faults)
    worker.py     one consumer variant per process, so a harness can kill it
    harness.py    a run's own schema, topic and group; workers; recovery; what the logs say
    nemesis.py    every fault: kills, restarts, partitions, stalls, failovers
    netlab.py     network namespaces and a relay for the partition faults
    checker.py    pure: (published IDs, effects) -> duplicates, lost, the balance check
    results.py    results files, provenance, the one driver loop
    report.py     the README's generated tables; charts.py its charts; claims.py the prose they check
    publishing.py the lab's producers: ready before the first timed send, counted, journaled
    settings.py   every address and role, from the environment
    cli.py        the flags every measurement shares
    layouts.py    M4's inbox layouts; retention.py the cron job that runs retention.sql
    roles.sql, grants.sql, pom.xml   least-privilege roles, their grants, Kafka's classpath

Imports run one way: the lab imports the post's files and variants/, never the reverse.
"""
