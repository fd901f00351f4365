"""The `--brokers` modes: which ports and settings a local cluster gets, and what recon is
told about it. No JVM is started."""

from pathlib import Path

import pytest

from services.devtools.infra.kafka import KafkaBroker
from services.devtools.infra.kafka_cluster import KafkaCluster
from services.devtools.infra.kraft_quorum import _read_uvarint, _uvarint
from services.devtools.infra.local_kafka import kafka_env, local_kafka


def test_one_broker_is_told_with_its_address_only(tmp_path: Path) -> None:
    kafka = local_kafka(tmp_path, 1, 9092)
    assert isinstance(kafka, KafkaBroker)
    assert kafka_env(kafka) == {"RECON_KAFKA_BOOTSTRAP": "127.0.0.1:9092"}


def test_three_brokers_share_a_quorum_and_get_cluster_durability(tmp_path: Path) -> None:
    kafka = local_kafka(tmp_path, 3, 9092)
    assert isinstance(kafka, KafkaCluster)
    assert [(n.port, n.controller_port) for n in kafka.nodes] == [
        (9092, 9093),
        (9094, 9095),
        (9096, 9097),
    ]
    assert kafka_env(kafka) == {
        "RECON_KAFKA_BOOTSTRAP": "127.0.0.1:9092,127.0.0.1:9094,127.0.0.1:9096",
        "RECON_KAFKA_REPLICATION_FACTOR": "3",
        "RECON_KAFKA_MIN_INSYNC_REPLICAS": "2",
    }
    # Every node votes and all were formatted with one cluster id, kept for the next start.
    assert {n.voters for n in kafka.nodes} == {"1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097"}
    assert [n.node_id for n in kafka.nodes] == [1, 2, 3]
    assert len({n.cluster_id for n in kafka.nodes}) == 1
    assert (
        KafkaCluster(tmp_path / "kafka-cluster", [1], [2], replication=1, min_insync=1)
        .nodes[0]
        .cluster_id
        == kafka.nodes[0].cluster_id
    )


def test_node_config_replicates_kafkas_own_topics(tmp_path: Path) -> None:
    node = local_kafka(tmp_path, 3, 9092)
    assert isinstance(node, KafkaCluster)
    first = node.nodes[0]
    first.data_dir.mkdir(parents=True)
    text = first._write_config().read_text()
    for line in (
        "offsets.topic.replication.factor=3",
        "transaction.state.log.replication.factor=3",
        "transaction.state.log.min.isr=2",
        "min.insync.replicas=2",
        "node.id=1",
    ):
        assert line in text.splitlines()


def test_a_cluster_too_small_for_its_replication_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        KafkaCluster(tmp_path, [1, 2], [3, 4], replication=3, min_insync=2)


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**21 + 5])
def test_describe_quorum_varints_round_trip(value: int) -> None:
    encoded = _uvarint(value)
    assert _read_uvarint(encoded + b"\x00", 0) == (value, len(encoded))
