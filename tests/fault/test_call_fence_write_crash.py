"""A decider killed between the two statements of its take's fence (services.dispatcher.
calls_begun.write_fence: its Kafka cluster registered in `kafka_clusters`, its token not yet
written to `call_fences`; the crash point `dispatcher.fence_cluster_registered`, an exit like
kill -9).

What it leaves: the cluster registered and the partition's fence still the previous owner's.
Kafka already fences that owner (the killed take initialised the partition's transactional
id), but Postgres does not: until the partition's next take writes its own fence, the
previous owner's zombie is not refused its calls (its claim is taken), exactly as before the
fence existed. The next take (the decider started again) writes it, and from then on the
zombie is refused. Real parts: the session's broker (every take initialises the real
transactional producer), Postgres, and a real decider process killed at that point."""

import asyncio
from pathlib import Path

import asyncpg
from support.fence_takes import taken_in_turn

from events.topics import PARTITIONS, Topics
from services.config import Settings
from services.crash_points import CRASH_ENV, CRASH_EXIT_CODE, FENCE_CLUSTER_REGISTERED
from services.devtools.stack import Stack
from services.dispatcher import calls_begun
from services.dispatcher.call_fence import Fence
from services.dispatcher.call_plan import Begun
from services.dispatcher.calls_begun import Claimed


def _row(partition: int) -> calls_begun.Row:
    return ("demo", f"k_fenced_{partition}", "forward", 1)


async def _recorded(conn: asyncpg.Connection) -> dict[str, tuple[int, int]]:
    rows = await conn.fetch("SELECT owner, producer_id, epoch FROM call_fences")
    return {r["owner"]: (r["producer_id"], r["epoch"]) for r in rows}


async def _begin(conn: asyncpg.Connection, partition: int, fence: Fence, attempt: int) -> Begun:
    """The zombie's begin of an attempt of its call on `partition`."""
    tenant, op_key, leg, _ = _row(partition)
    call = calls_begun.Call(
        tenant,
        f"fenced-{partition}",
        op_key,
        leg,
        attempt,
        "agent-7",
        "sandbox",
        "payments.charge",
        holder="zombie",
        lease_s=0.001,
        fence=fence,
    )
    (begun,) = await calls_begun.begin_many(conn, [call])
    return begun


async def _claims(conn: asyncpg.Connection, zombies: list[Fence]) -> list[Claimed]:
    """The zombie's claim of its begun call on each partition, its lease let go after."""
    claimed = []
    for partition, fence in enumerate(zombies):
        claimed.append(await calls_begun.claim(conn, _row(partition), "zombie", 30.0, fence))
    await conn.execute("UPDATE calls_begun SET held_until = NULL")
    return claimed


async def test_a_take_killed_between_its_cluster_and_its_fence_leaves_the_zombie_to_the_next_take(
    kafka_bootstrap: str,
    fresh_database: str,
    topic_prefix: str,
    tmp_path: Path,
    conn: asyncpg.Connection,
) -> None:
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=fresh_database,
        topics=Topics(topic_prefix),
        environment="test",
    )
    # The previous owner of every partition: its take, its fence written, a call begun.
    zombies = [(await taken_in_turn(settings, p, 1))[0] for p in range(PARTITIONS)]
    for partition, fence in enumerate(zombies):
        assert await calls_begun.write_fence(conn, fence)
        assert (await _begin(conn, partition, fence, 1)).written
    before = await _recorded(conn)

    stack = Stack(
        kafka_bootstrap=kafka_bootstrap,
        database_url=fresh_database,
        log_dir=tmp_path / "logs",
        topic_prefix=topic_prefix,
        migrate=False,
        extra_env={CRASH_ENV: FENCE_CLUSTER_REGISTERED},
    )
    try:
        # The decider takes every partition (fencing the previous owner in Kafka) and dies
        # at the first fence it writes, its cluster registered.
        killed = stack.start("decider")
        code = await asyncio.to_thread(killed.wait, 60)
        assert code == CRASH_EXIT_CODE, stack.log_tail("decider")
        stack.processes.pop("decider")
        registered = await conn.fetchval("SELECT array_agg(cluster_id) FROM kafka_clusters")
        assert registered == [zombies[0].cluster]
        after = await _recorded(conn)
        left = [p for p, fence in enumerate(zombies) if after[fence.owner] == before[fence.owner]]
        # At least the killed write's partition: the others' writes ran beside it.
        assert left, (before, after)

        # Until a take writes again, the previous owner's zombie is not refused there: its
        # claim is taken...
        claimed = await _claims(conn, zombies)
        assert [claimed[p] for p in left] == [Claimed.TAKEN] * len(left), claimed
        for p in left:  # and a call of its begun
            assert (await _begin(conn, p, zombies[p], 2)).written

        # The next take (the decider started again, unarmed) writes its fence...
        del stack.extra_env[CRASH_ENV]
        stack.start("decider")
        async with asyncio.timeout(45):
            while set((await _recorded(conn)).items()) & set(before.items()):
                assert stack.processes["decider"].poll() is None, stack.log_tail("decider")
                await asyncio.sleep(0.1)
        # ... and from then on the zombie is refused on every partition.
        assert await _claims(conn, zombies) == [Claimed.SUPERSEDED] * PARTITIONS
        for p, fence in enumerate(zombies):
            begun = await _begin(conn, p, fence, 3)
            assert begun.superseded and not begun.written
        print(f"left unwritten by the killed take: partitions {left}")
    finally:
        stack.stop_all()
        print(f"--- decider ---\n{stack.log_tail('decider', 30)}")
