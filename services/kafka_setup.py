"""Creating recon's topics with the settings the design relies on.

Durability: every topic is created with `Durability.replication_factor` copies and
`min.insync.replicas`, and every producer writes with acks=all (services.kafka_clients), so
an acknowledged record is on at least min.insync.replicas brokers. The defaults (1 and 1)
suit a single local broker; a cluster should run 3 and 2, so that one broker may be down
without refusing writes and an acknowledged record survives the loss of any one broker.
Only topics that do not exist yet are created: an existing topic keeps its configuration.
"""

import asyncio
import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from events.topics import PARTITIONS, Topics
from services.config import Durability
from services.kafka_clients import connection

log = logging.getLogger(__name__)

FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
_TOPIC_ALREADY_EXISTS = 36  # Kafka error code: another process created it first


class TopicSetupError(RuntimeError):
    """The broker refused to create a topic (e.g. more replicas than brokers)."""


def topic_configs(topics: Topics) -> dict[str, dict[str, str]]:
    return {
        # The log is the truth: events, and the inputs they were decided from, stay.
        topics.commands: FOREVER,
        topics.observations: FOREVER,
        topics.events: FOREVER,
        topics.checkpoints: FOREVER,
        topics.dead_letters: FOREVER,
        topics.drift: FOREVER,
        topics.governance: FOREVER,
        # Only the latest state per transaction matters for a restore.
        topics.decider_state: {
            "cleanup.policy": "compact",
            "min.cleanable.dirty.ratio": "0.1",
            "segment.ms": "600000",
        },
    }


async def ensure_topics(
    bootstrap: str,
    topics: Topics,
    timeout_s: float = 60,
    *,
    durability: Durability | None = None,
    extra: dict[str, dict[str, str]] | None = None,
) -> None:
    """Create every topic (and each `extra` one: name -> configuration) that does not
    exist yet; waits for the broker to answer.

    Any retriable Kafka error is waited out until `timeout_s`, not only a broker that is not
    up yet: a broker that restarts between the connection and the request (NodeNotReady, a
    closed connection) must not stop the process at start-up (found by `make chaos`: a
    decider restarted during a broker restart exited with NodeNotReadyError)."""
    durability = durability or Durability()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        admin = AIOKafkaAdminClient(**connection(bootstrap, "setup"), request_timeout_ms=10000)
        try:
            await admin.start()
            await _create_missing(admin, topic_configs(topics) | (extra or {}), durability)
            return
        except KafkaError as error:
            if not error.retriable or loop.time() > deadline:
                raise
            log.warning("Kafka not ready for topic set-up (%r); retrying", error)
        finally:
            await admin.close()
        await asyncio.sleep(0.5)


async def _create_missing(
    admin: AIOKafkaAdminClient, configs: dict[str, dict[str, str]], durability: Durability
) -> None:
    replicated = {"min.insync.replicas": str(durability.min_insync_replicas)}
    existing = set(await admin.list_topics())
    wanted = [
        NewTopic(
            name,
            PARTITIONS,
            durability.replication_factor,
            topic_configs=config | replicated,
        )
        for name, config in configs.items()
        if name not in existing
    ]
    if not wanted:
        return
    try:
        response = await admin.create_topics(wanted)
    except TopicAlreadyExistsError:
        return  # another process created them first; same configuration
    # The broker answers per topic; a refusal (a replication factor larger than the cluster,
    # say) does not raise, and would otherwise leave every process waiting on a topic that
    # never appears.
    refused = [
        f"{topic}: error {code} {message or ''}".strip()
        for topic, code, *rest in response.topic_errors
        for message in [rest[0] if rest else None]
        if code not in (0, _TOPIC_ALREADY_EXISTS)
    ]
    if refused:
        raise TopicSetupError(
            f"Kafka refused to create topics with replication factor "
            f"{durability.replication_factor} and min.insync.replicas "
            f"{durability.min_insync_replicas} (RECON_KAFKA_REPLICATION_FACTOR, "
            f"RECON_KAFKA_MIN_INSYNC_REPLICAS): {'; '.join(refused)}"
        )
    log.info("created topics %s", [t.name for t in wanted])
