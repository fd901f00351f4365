"""Creating recon's topics with the settings the design relies on."""

import asyncio
import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError

from events.topics import PARTITIONS, Topics

log = logging.getLogger(__name__)

FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}


def topic_configs(topics: Topics) -> dict[str, dict[str, str]]:
    return {
        # The log is the truth: events, and the inputs they were decided from, stay.
        topics.commands: FOREVER,
        topics.observations: FOREVER,
        topics.events: FOREVER,
        topics.dead_letters: FOREVER,
        topics.drift: FOREVER,
        # Only the latest state per transaction matters for a restore.
        topics.decider_state: {
            "cleanup.policy": "compact",
            "min.cleanable.dirty.ratio": "0.1",
            "segment.ms": "600000",
        },
    }


async def ensure_topics(bootstrap: str, topics: Topics, timeout_s: float = 60) -> None:
    """Create every topic that does not exist yet; waits for the broker to answer."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        try:
            await admin.start()
            break
        except KafkaConnectionError:
            await admin.close()
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(name, PARTITIONS, 1, topic_configs=config)
            for name, config in topic_configs(topics).items()
            if name not in existing
        ]
        if wanted:
            try:
                await admin.create_topics(wanted)
            except TopicAlreadyExistsError:
                pass  # another process created them first; same configuration
            log.info("created topics %s", [t.name for t in wanted])
    finally:
        await admin.close()
