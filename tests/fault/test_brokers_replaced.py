"""Brokers replaced under one database (docs/operations.md, "Existing Kafka and Postgres"):
the deciders move to a new Kafka cluster, whose producer ids start again from the lowest,
and their calls go on with no row deleted by hand, while the old cluster's last owner of a
partition (a zombie that never reached the new brokers) is refused its calls
(services.dispatcher.call_fence: a fence names its cluster, and the database orders the
clusters by their arrival). Real parts: the session's broker as the old cluster, a second
broker formatted with a cluster id of its own as the new one, Postgres, the production
take's fence (runtime.producer_fence, a transactional producer initialised on each),
DispatchHost.fenced's write and the claim's and the begin's statements."""

import asyncio
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from support.fence_takes import fence_recorded, taken_in_turn

from events.topics import Topics
from services.config import Settings
from services.decider.dispatch_host import DispatchHost
from services.devtools.infra.kafka import KafkaBroker
from services.devtools.ports import free_port
from services.dispatcher import calls_begun
from services.dispatcher.call_fence import Fence
from services.dispatcher.calls_begun import Claimed

ROW = ("demo", "k_moved", "forward", 1)


@pytest.fixture
def new_cluster(tmp_path: Path) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path / "new-kafka", free_port(), free_port())
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _settings(bootstrap: str, database_url: str, prefix: str) -> Settings:
    return Settings(
        kafka_bootstrap=bootstrap,
        database_url=database_url,
        topics=Topics(prefix),
        environment="test",
    )


async def _fenced(host: DispatchHost, conn: asyncpg.Connection, fence: Fence) -> None:
    """`host` took partition 0 with `fence`: DispatchHost.fenced's write, waited for."""
    host.fenced(0, fence)
    await fence_recorded(conn, fence)


def _call(holder: str, fence: Fence, attempt: int) -> calls_begun.Call:
    return calls_begun.Call(
        ROW[0],
        "moved-1",
        ROW[1],
        ROW[2],
        attempt,
        "agent-7",
        "sandbox",
        "payments.charge",
        holder=holder,
        lease_s=0.001,
        fence=fence,
    )


async def test_the_new_clusters_takes_call_with_no_hand_and_the_old_clusters_zombie_does_not(
    kafka_bootstrap: str,
    new_cluster: KafkaBroker,
    fresh_database: str,
    topic_prefix: str,
    conn: asyncpg.Connection,
) -> None:
    old = _settings(kafka_bootstrap, fresh_database, topic_prefix)
    new = _settings(new_cluster.bootstrap, fresh_database, topic_prefix)
    hosts = [
        DispatchHost(s, lambda: {0}, lambda answer: None, lambda *key: None) for s in (old, new)
    ]
    try:
        # The old cluster's last take (its second: the token is past the new cluster's
        # first, whatever the session's broker gave out before), written at its take; the
        # zombie's call begun under it.
        *_, zombie = await taken_in_turn(old, 0, 2)
        await _fenced(hosts[0], conn, zombie)
        (begun,) = await calls_begun.begin_many(conn, [_call("zombie", zombie, 1)])
        assert begun.written
        # The deciders start on the new brokers: a fresh cluster's first producer id.
        (owner,) = await taken_in_turn(new, 0, 1)
        assert owner.cluster != zombie.cluster
        assert (owner.producer_id, owner.epoch) <= (zombie.producer_id, zombie.epoch)
        await _fenced(hosts[1], conn, owner)  # written over the old cluster's: no hand
        await asyncio.sleep(0.01)  # the zombie's lease lapsed
        assert await calls_begun.claim(conn, ROW, "owner", 30.0, owner) is Claimed.TAKEN
        (begun,) = await calls_begun.begin_many(conn, [_call("owner", owner, 2)])
        assert begun.written
        # The zombie of the old cluster: its redelivery's claim, its next call's begin and
        # its take's write retried late are all refused.
        await conn.execute("UPDATE calls_begun SET held_until = NULL")
        assert await calls_begun.claim(conn, ROW, "zombie", 30.0, zombie) is Claimed.SUPERSEDED
        (begun,) = await calls_begun.begin_many(conn, [_call("zombie", zombie, 3)])
        assert begun.superseded and not begun.written
        assert not await hosts[0].gate.write_fence(zombie)
    finally:
        for host in hosts:
            await host.gate.close()
            await host.producer.stop()
