"""The measurements beyond the post's four (which stay at the top: measure_kill.py,
measure_rebalance.py, measure_throughput.py, measure_storage.py). Run each as a module
from the checkout, e.g. `python -m measurements.measure_faults --help`.

    measure_faults.py     M6: restarts and partitions of the single stack
    measure_external.py   M5: effects outside the database
    measure_race.py       two consumers on one event at once
    measure_publish.py    M7: producers and relays that publish twice
    measure_eos.py        Kafka's exactly-once loop against Postgres
    measure_cluster.py    M8: the replicated lab, leader kills and failovers
    measure_latency.py    end-to-end latency at a steady rate
    measure_retention.py  M4b: a replay from further back than the inbox remembers
    profile_d.py, profile_p.py   where d's and p's time goes
    tour.py               the pattern end to end in a minute
"""
