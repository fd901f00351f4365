"""Which Kafka cluster a started client talks to: the id the brokers' metadata answers carry
(Metadata v2 and later; every Kafka 3.x broker sends one). The call fence names it
(services.dispatcher.call_fence): producer ids order the takes of one cluster only.

aiokafka (0.14.0, uv.lock) reads the field off each metadata answer and keeps nothing of it
(`ClusterMetadata.update_metadata`), so the id is asked for here: one Metadata request for
no topics, to any broker the client knows, on the client's own connections. Asked at each
take, not once per process: the bootstrap address may reach other brokers after a restart
of the cluster behind it, and a take's fence must name the cluster its producer was
initialised on.
"""

from aiokafka import AIOKafkaClient
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.metadata import MetadataRequest


async def cluster_id(client: AIOKafkaClient) -> str:
    """The cluster's id. Raises a KafkaError when no broker answers (the take is retried),
    and ValueError when the broker names no cluster (a broker older than Kafka 0.10.1, which
    recon does not run on: docs/operations.md asks for 3.x)."""
    node = client.get_random_node()
    if node is None:
        raise KafkaConnectionError("no broker known to ask the cluster's id")
    answer = await client.send(node, MetadataRequest([]))
    found = getattr(answer, "cluster_id", None)
    if not isinstance(found, str) or not found:
        raise ValueError(
            f"broker {node} named no Kafka cluster id in its metadata answer ({found!r}):"
            " recon needs Kafka 3.x"
        )
    return found
