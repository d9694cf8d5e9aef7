"""The two settings every script, harness and test reads, from one place.

Point them elsewhere with the environment (for example at the docker-compose
stack, which uses the same ports):

    CONSUMER_DSN=postgresql://patterns:patterns@localhost:55432/consumer
    KAFKA_BROKERS=localhost:59092
"""
import os
from pathlib import Path

DEFAULT_DSN = "postgresql://patterns:patterns@localhost:55432/consumer"
DEFAULT_BROKERS = "localhost:59092"
DSN = os.environ.get("CONSUMER_DSN", DEFAULT_DSN)
BROKERS = os.environ.get("KAFKA_BROKERS", DEFAULT_BROKERS)

# Not settings but places, named once: the checkout, and where results are written.
ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
