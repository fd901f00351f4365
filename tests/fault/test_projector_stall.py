"""A projector whose rebalance cannot finish does not stay alive projecting nothing.

Issue 18 item 15 (issue 10's note): after a Kafka restart and a Postgres kill -9 a projector
stayed alive, logged nothing, and its group stayed empty for good. aiokafka awaits the
rebalance listener (the seek to the offsets stored in Postgres) before it heartbeats or
fetches again. Here the session's real Postgres is frozen (SIGSTOP: connections open, no
answer, as a half-open socket behaves) while a second member joins the projector's group,
so the projector's listener reads its offsets from a database that does not answer. The
read must give up and retry (it waited for ever), and a projector still not projecting after
its stall limit must exit for its supervisor to restart it; the successor catches up.
"""

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from conftest import Infra
from support.crash_support import wait_for_log
from support.txbuilders import log_of, submit

from events.keys import partition_key
from events.topics import Topics
from services.devtools.infra import PostgresServer
from services.devtools.stack import Stack
from services.kafka_setup import ensure_topics
from services.projector.stall_watch import STALLED_EXIT_CODE

STALL_S = 12
TIMEOUT_S = 60.0


async def test_a_projector_stuck_in_its_rebalance_exits_and_its_successor_catches_up(
    infra: Infra, fresh_database: str, topic_prefix: str, tmp_path: Path
) -> None:
    postgres = infra.require_postgres()
    topics = Topics(topic_prefix)
    await ensure_topics(infra.kafka_bootstrap, topics)
    stack = Stack(
        kafka_bootstrap=infra.kafka_bootstrap,
        database_url=fresh_database,
        log_dir=tmp_path,
        topic_prefix=topic_prefix,
        extra_env={"RECON_PROJECTOR_STALL_S": str(STALL_S)},
    )
    projector = stack.start("projector")
    try:
        await _produce(infra.kafka_bootstrap, topics.events, "tx-before")
        await _wait_projected(fresh_database, 1)

        async with _frozen(postgres), _second_member(infra.kafka_bootstrap, stack, topics):
            # The read of the stored offsets gives up and says so, instead of waiting.
            await wait_for_log(stack, "projector", "cannot read stored offsets", timeout=30)
            # Still not projecting at the stall limit: it exits to be restarted.
            deadline = time.monotonic() + STALL_S + 30
            while projector.poll() is None:
                assert time.monotonic() < deadline, stack.log_tail("projector")
                await asyncio.sleep(0.2)
            assert projector.returncode == STALLED_EXIT_CODE, stack.log_tail("projector")
        assert "not projecting for" in stack.log_tail("projector", 400)

        stack.start("projector")  # what the supervisor does
        await _produce(infra.kafka_bootstrap, topics.events, "tx-after")
        await _wait_projected(fresh_database, 2)
    finally:
        for name in list(stack.processes):
            if stack.processes[name].poll() is None:
                stack.stop(name)
        print(f"--- projector ---\n{stack.log_tail('projector', 60)}")


@asynccontextmanager
async def _frozen(postgres: PostgresServer) -> AsyncIterator[None]:
    """The postmaster and every backend stopped. Each backend leads its own process group
    (Postgres calls setsid() in every child), so the postmaster's group alone is not all."""
    assert postgres._proc is not None
    pids = [postgres._proc.pid, *_children(postgres._proc.pid)]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def _children(parent: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


@asynccontextmanager
async def _second_member(bootstrap: str, stack: Stack, topics: Topics) -> AsyncIterator[None]:
    """A member joining the projector's group: a rebalance, so the projector's listener runs."""
    member = AIOKafkaConsumer(
        topics.events,
        topics.drift,
        bootstrap_servers=bootstrap,
        group_id=f"{stack.topic_prefix}recon-projector",
        enable_auto_commit=False,
    )
    await member.start()
    polling = asyncio.create_task(_poll(member))
    try:
        yield
    finally:
        polling.cancel()
        await member.stop()


async def _poll(member: AIOKafkaConsumer) -> None:
    while True:
        await member.getmany(timeout_ms=500)


async def _produce(bootstrap: str, topic: str, tx_id: str) -> None:
    envelope = log_of(submit(["charge"], tx_id=tx_id), tx_id=tx_id)[0]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        key = partition_key("demo", tx_id)
        await producer.send_and_wait(topic, envelope.model_dump_json().encode(), key)
    finally:
        await producer.stop()


async def _wait_projected(url: str, events: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while await conn.fetchval("SELECT count(*) FROM events") < events:
                await asyncio.sleep(0.2)
    finally:
        await conn.close()
