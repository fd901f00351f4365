"""The intake's consumer group watch (services.intake.group_watch), its requests and CPU per
look, against a running broker: docs/operations.md, "A consumer group not advancing".

    uv run python -m services.devtools.group_watch_cost --kafka 127.0.0.1:9492

Fresh topics; the saga and projector groups read recon.events and commit behind a commit
marker on each partition, as recon's do once idle. The watch then looks ROUNDS times in a
row (its `follow`, then its `look`, as its loop does every WATCH_INTERVAL_S) on a clock
that moves WATCH_INTERVAL_S per look, so whatever it keeps for a while is asked again as
often as in an intake (the first looks, which read the gaps, are left out). The requests
are counted at the clients' connections (every Kafka client in this process is the
watch's), the CPU is this process's.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid
from collections import Counter
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.conn import AIOKafkaConnection

from events.topics import Topics
from services.config import Settings
from services.consumer_groups import PROJECTOR, SAGA
from services.intake.group_progress import READ_AFTER_S
from services.intake.group_watch import WATCH_INTERVAL_S, GroupWatch
from services.intake.health import admin_client
from services.kafka_clients import group_consumer
from services.kafka_setup import ensure_topics

ROUNDS = 60
WARM_UP = 10  # past READ_AFTER_S on the watch's clock: the gaps read and remembered

sent: Counter[str] = Counter()


def _count_requests() -> None:
    send = AIOKafkaConnection.send

    def counted(self: AIOKafkaConnection, request: Any, *args: Any, **kwargs: Any) -> Any:
        name = type(request).__name__.split("_")[0].removesuffix("Request")
        sent["ListOffsets" if name == "Offset" else name] += 1
        return send(self, request, *args, **kwargs)

    AIOKafkaConnection.send = counted


async def idle_groups(settings: Settings) -> None:
    """The saga and the projector read everything on recon.events and commit: a commit
    marker stays behind each position."""
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap,
        transactional_id=f"{settings.topics.events}.cost",
    )
    await producer.start()
    partitions = await producer.partitions_for(settings.topics.events)
    async with producer.transaction():
        for partition in partitions:
            await producer.send_and_wait(settings.topics.events, b"x", partition=partition)
    await producer.stop()
    for name in (SAGA, PROJECTOR):
        consumer = group_consumer(settings, name, f"cost-{name}")
        consumer.subscribe([settings.topics.events])
        await consumer.start()
        read = 0
        while read < len(partitions):
            for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                read += len(records)
                await consumer.commit({tp: records[-1].offset + 1})
        await consumer.stop()


async def measure(bootstrap: str) -> None:
    settings = Settings(
        kafka_bootstrap=bootstrap,
        database_url="postgresql://unused@127.0.0.1:1/unused",
        topics=Topics(f"cost{uuid.uuid4().hex[:6]}."),
        environment="test",
    )
    await ensure_topics(settings.kafka_bootstrap, settings.topics)
    await idle_groups(settings)
    admin = admin_client(settings)
    await admin.start()
    now = [0.0]
    watch = GroupWatch(admin, settings, clock=lambda: now[0])
    assert WARM_UP * WATCH_INTERVAL_S > READ_AFTER_S
    _count_requests()
    try:
        cpu = 0.0
        for round_ in range(WARM_UP + ROUNDS):
            if round_ == WARM_UP:
                sent.clear()
                cpu = time.process_time()
            await watch.follow()
            await watch.look()
            now[0] += WATCH_INTERVAL_S
        cpu = (time.process_time() - cpu) / ROUNDS * 1000
    finally:
        await watch.close()
        await admin.close()
    per_look = {name: round(n / ROUNDS, 2) for name, n in sorted(sent.items())}
    print(
        f"{ROUNDS} looks (follow and look) after {WARM_UP}: {cpu:.2f} ms CPU per look;"
        f" requests per look {sum(sent.values()) / ROUNDS:.2f}: {per_look}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka", required=True, help="a broker's bootstrap address")
    # The groups it judges have no member: the watch's verdicts are not what is measured.
    logging.getLogger("services.intake.group_watch").setLevel(logging.ERROR)
    asyncio.run(measure(parser.parse_args().kafka))


if __name__ == "__main__":
    main()
