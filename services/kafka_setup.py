"""Creating recon's topics with the settings the design relies on.

Durability: every topic is created with `TopicLayout.replication_factor` copies and
`min.insync.replicas`, and every producer writes with acks=all (services.kafka_clients), so
an acknowledged record is on at least min.insync.replicas brokers. The defaults (1 and 1)
suit a single local broker; a cluster should run 3 and 2, so that one broker may be down
without refusing writes and an acknowledged record survives the loss of any one broker.

Partitions: every topic gets `TopicLayout.partitions`, the same count, because a
transaction's records sit on the same partition number of every topic (the key's
partition) and a decider owns partition p of its inputs and its outputs together
(docs/scaling.md "Partitions").

Only topics that do not exist yet are created: an existing topic keeps its configuration.
But one whose partition count is not the configured one is refused: a count changed on a
live log moves keys to other partitions (a transaction's next command would reach a decider
that never restored it), and topics of different counts are not co-partitioned.
"""

import asyncio
import functools
import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from events.topics import Topics
from services.config import Settings, TopicLayout
from services.kafka_clients import connection
from services.stop_race import stopped_within, unless_stopped

log = logging.getLogger(__name__)

FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
_TOPIC_ALREADY_EXISTS = 36  # Kafka error code: another process created it first
# How many times (0.1 s apart) an existing topic's partitions are asked for.
CHECK_ATTEMPTS = 50


class TopicSetupError(RuntimeError):
    """The broker refused to create a topic (e.g. more replicas than brokers), or an
    existing topic has another partition count than the configured one."""


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


async def ensure_recon_topics(
    settings: Settings,
    extra: dict[str, dict[str, str]] | None = None,
    stop: asyncio.Event | None = None,
) -> bool:
    """ensure_topics for a recon process: its settings' topics, laid out as they say."""
    return await ensure_topics(
        settings.kafka_bootstrap,
        settings.topics,
        layout=settings.topic_layout,
        extra=extra,
        stop=stop,
    )


async def ensure_topics(
    bootstrap: str,
    topics: Topics,
    timeout_s: float = 60,
    *,
    layout: TopicLayout | None = None,
    extra: dict[str, dict[str, str]] | None = None,
    stop: asyncio.Event | None = None,
) -> bool:
    """Create every topic (and each `extra` one: name -> configuration) that does not
    exist yet, and check that those that do have `layout`'s partition count; waits for the
    broker to answer. False if `stop` was set first: an attempt under way is cancelled
    (services.stop_race.unless_stopped), so a process asked to stop while the broker
    answers nothing stops then, not at the deadline with an error. Topics a cancelled
    attempt asked for are created or not, as a crash would leave them: the next start
    asks again.

    Any retriable Kafka error is waited out until `timeout_s`, not only a broker that is not
    up yet: a broker that restarts between the connection and the request (NodeNotReady, a
    closed connection) must not stop the process at start-up (found by `make chaos`: a
    decider restarted during a broker restart exited with NodeNotReadyError)."""
    layout = layout or TopicLayout()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        admin = AIOKafkaAdminClient(**connection(bootstrap, "setup"), request_timeout_ms=10000)
        try:
            if not await unless_stopped(
                functools.partial(_set_up, admin, topic_configs(topics) | (extra or {}), layout),
                stop,
            ):
                log.info("topic set-up given up, the process is stopping")
                return False
            return True
        except KafkaError as error:
            if not error.retriable or loop.time() > deadline:
                raise
            log.warning("Kafka not ready for topic set-up (%r); retrying", error)
        finally:
            await admin.close()
        if await stopped_within(stop, 0.5):
            return False


async def _set_up(
    admin: AIOKafkaAdminClient, configs: dict[str, dict[str, str]], layout: TopicLayout
) -> None:
    await admin.start()
    await _create_missing(admin, configs, layout)


async def _create_missing(
    admin: AIOKafkaAdminClient, configs: dict[str, dict[str, str]], layout: TopicLayout
) -> None:
    replicated = {"min.insync.replicas": str(layout.min_insync_replicas)}
    existing = set(await admin.list_topics())
    await _check_partitions(admin, [name for name in configs if name in existing], layout)
    wanted = [
        NewTopic(
            name,
            layout.partitions,
            layout.replication_factor,
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
            f"{layout.replication_factor} and min.insync.replicas "
            f"{layout.min_insync_replicas} (RECON_KAFKA_REPLICATION_FACTOR, "
            f"RECON_KAFKA_MIN_INSYNC_REPLICAS): {'; '.join(refused)}"
        )
    log.info("created topics %s", [t.name for t in wanted])


async def _check_partitions(
    admin: AIOKafkaAdminClient, names: list[str], layout: TopicLayout
) -> None:
    """Refuse to start on existing topics whose partition count is not `layout`'s."""
    counts: dict[str, int] = {}
    # A topic another process has just created can be listed before this broker's metadata
    # holds its partitions (KRaft propagates them a moment later): asked again until it
    # does, and left unchecked after that (its creator used its own layout's count).
    unknown = names
    for _ in range(CHECK_ATTEMPTS):
        if not unknown:
            break
        for topic in await admin.describe_topics(unknown):
            if topic["error_code"] == 0 and topic["partitions"]:
                counts[topic["topic"]] = len(topic["partitions"])
        unknown = [name for name in names if name not in counts]
        if unknown:
            await asyncio.sleep(0.1)
    other = sorted(f"{name} has {n}" for name, n in counts.items() if n != layout.partitions)
    if other:
        raise TopicSetupError(
            f"RECON_KAFKA_PARTITIONS is {layout.partitions} but existing topics differ "
            f"({'; '.join(other)}). A log's partition count cannot change: it moves "
            "transactions' keys to other partitions. Set RECON_KAFKA_PARTITIONS to the "
            'count the topics were created with (docs/scaling.md "Partitions")'
        )
