"""The two settings every script, harness and test reads, from one place.

Point them elsewhere with the environment (for example at the docker-compose
stack, which uses the same ports):

    CONSUMER_DSN=postgresql://patterns:patterns@localhost:55432/consumer
    KAFKA_BROKERS=localhost:59092
"""
import os

DSN = os.environ.get("CONSUMER_DSN", "postgresql://patterns:patterns@localhost:55432/consumer")
BROKERS = os.environ.get("KAFKA_BROKERS", "localhost:59092")
