"""Local infrastructure without Docker: a single-node KRaft Kafka broker and a Postgres server.

Both run as plain child processes from data directories under `.cache/`, so `make test`,
`make run` and the integration tests use the real brokers on any machine with Java 17,
Maven and the Python dependencies.
"""

from services.devtools.infra.kafka import KafkaBroker, ensure_kafka_jars
from services.devtools.infra.postgres import PostgresServer

__all__ = ["KafkaBroker", "PostgresServer", "ensure_kafka_jars"]
