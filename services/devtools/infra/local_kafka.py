"""The local Kafka that `make run` and `python -m services.devtools.infra up` start: one broker or a
three-node cluster (`--brokers`), and the RECON_* variables that point recon at it."""

from __future__ import annotations

from pathlib import Path

from services.devtools.infra.kafka import KafkaBroker
from services.devtools.infra.kafka_cluster import KafkaCluster

# What `--brokers` accepts: one node alone, or a cluster that survives losing any one node.
BROKER_CHOICES = (1, 3)


def local_kafka(data_dir: Path, brokers: int, port: int) -> KafkaBroker | KafkaCluster:
    """One broker on `port` (controller on port+1), or `brokers` nodes where node i
    listens on port+2i and its controller on port+2i+1 (9092/9093, 9094/9095, ...)."""
    if brokers == 1:
        return KafkaBroker(data_dir / "kafka", port, port + 1)
    return KafkaCluster(
        data_dir / "kafka-cluster",
        [port + 2 * i for i in range(brokers)],
        [port + 2 * i + 1 for i in range(brokers)],
    )


def kafka_env(kafka: KafkaBroker | KafkaCluster) -> dict[str, str]:
    """The RECON_* variables that point recon at `kafka`, with a cluster's durability."""
    env = {"RECON_KAFKA_BOOTSTRAP": kafka.bootstrap}
    if isinstance(kafka, KafkaCluster):
        env["RECON_KAFKA_REPLICATION_FACTOR"] = str(kafka.replication)
        env["RECON_KAFKA_MIN_INSYNC_REPLICAS"] = str(kafka.min_insync)
    return env
