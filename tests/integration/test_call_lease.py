"""The lease on a `calls_begun` row (services.dispatcher.call_lease): the begin that writes
the row holds the call, a claim by another holder waits while that lease is live and takes
it once it is released or lapsed, and a release by a holder whose lease was taken since
leaves the new holder's alone. A claim whose fence is older than its partition owner's is
refused, whoever holds the lease (services.dispatcher.call_fence). Real Postgres: the
statements are the production ones."""

import asyncio
import dataclasses

import asyncpg

from services.dispatcher import call_plan, calls_begun
from services.dispatcher.call_fence import Fence
from services.dispatcher.calls_begun import Claimed

ROW = ("demo", "k_lease", "forward", 1)
# The Kafka cluster the fences below were given by (services.kafka_cluster_id).
CLUSTER = "x9oM2vKcQWu3hPz1sTn0bA"


def a_call(holder: str, lease_s: float) -> calls_begun.Call:
    return calls_begun.Call(
        "demo",
        "lease-1",
        "k_lease",
        "forward",
        1,
        "agent-7",
        "sandbox",
        "payments.charge",
        holder=holder,
        lease_s=lease_s,
        fence=None,
    )


async def test_a_begun_call_is_claimed_by_another_only_once_its_caller_released_it(
    conn: asyncpg.Connection,
) -> None:
    (begun,) = await calls_begun.begin_many(conn, [a_call("old-owner", 30.0)])
    assert begun == call_plan.Begun((), written=True)
    # The new owner's take-over: the old owner's call may be on the wire.
    assert await calls_begun.claim(conn, ROW, "new-owner", 30.0, None) is Claimed.HELD
    # Its own holder may claim it again (a plan's claim after its own begin).
    assert await calls_begun.claim(conn, ROW, "old-owner", 30.0, None) is Claimed.TAKEN
    await calls_begun.release_many(conn, [(ROW, "old-owner")])
    assert await calls_begun.claim(conn, ROW, "new-owner", 30.0, None) is Claimed.TAKEN
    # A late release by the old holder leaves the new one's lease alone.
    await calls_begun.release_many(conn, [(ROW, "old-owner")])
    assert await calls_begun.claim(conn, ROW, "third", 30.0, None) is Claimed.HELD


async def test_a_caller_that_died_mid_call_is_waited_for_until_its_lease_lapses(
    conn: asyncpg.Connection,
) -> None:
    # Killed between its begin and its release: nobody clears the lease.
    await calls_begun.begin_many(conn, [a_call("killed", 0.5)])
    assert await calls_begun.claim(conn, ROW, "new-owner", 30.0, None) is Claimed.HELD
    await asyncio.sleep(0.6)
    assert await calls_begun.claim(conn, ROW, "new-owner", 30.0, None) is Claimed.TAKEN


async def test_rows_without_a_lease_and_purged_rows_wait_for_nobody(
    conn: asyncpg.Connection,
) -> None:
    # Written by a release before the lease (every begin now takes one).
    await conn.execute(
        "INSERT INTO calls_begun (tenant, op_key, leg, attempt) VALUES ($1, $2, $3, $4)", *ROW
    )
    assert await conn.fetchval("SELECT held_until FROM calls_begun") is None
    assert await calls_begun.claim(conn, ROW, "new-owner", 30.0, None) is Claimed.TAKEN
    await conn.execute("DELETE FROM calls_begun")
    assert await calls_begun.claim(conn, ROW, "new-owner", 30.0, None) is Claimed.NO_ROW


async def test_a_claim_older_than_its_partition_owners_fence_is_refused_whoever_holds_it(
    conn: asyncpg.Connection,
) -> None:
    old = Fence("recon-decider-0", 7, 3, CLUSTER)
    new = Fence("recon-decider-0", 7, 4, CLUSTER)
    await calls_begun.begin_many(conn, [a_call("zombie", 0.001)])
    await asyncio.sleep(0.01)  # the zombie's own lease lapsed: nobody holds the call
    assert await calls_begun.write_fence(conn, new)
    # The zombie's redelivery, with the fence it took the partition with: refused, the
    # lease left as it was.
    assert await calls_begun.claim(conn, ROW, "zombie", 30.0, old) is Claimed.SUPERSEDED
    assert await conn.fetchval("SELECT holder FROM calls_begun") == "zombie"
    assert await conn.fetchval("SELECT held_until < now() FROM calls_begun")
    # The owner's, and a later owner's (a new producer id once an epoch runs out), go on.
    assert await calls_begun.claim(conn, ROW, "owner", 30.0, new) is Claimed.TAKEN
    later = Fence("recon-decider-0", 8, 0, CLUSTER)
    assert await calls_begun.claim(conn, ROW, "later", 30.0, later) is Claimed.HELD
    # A fence is kept only if newer: an older take's write, late, changes nothing.
    assert not await calls_begun.write_fence(conn, old)
    assert await calls_begun.claim(conn, ROW, "zombie", 30.0, old) is Claimed.SUPERSEDED
    # Another partition's fence, or none (a host that takes no partitions), is not refused.
    other = Fence("recon-decider-1", 1, 0, CLUSTER)
    await calls_begun.release_many(conn, [(ROW, "owner")])
    assert await calls_begun.claim(conn, ROW, "other", 30.0, other) is Claimed.TAKEN
    await calls_begun.release_many(conn, [(ROW, "other")])
    assert await calls_begun.claim(conn, ROW, "unfenced", 30.0, None) is Claimed.TAKEN


async def test_a_kafka_cluster_that_arrived_later_supersedes_the_ones_before_whatever_its_ids(
    conn: asyncpg.Connection,
) -> None:
    # Brokers replaced under one database: the new cluster's producer ids start again low.
    before = Fence("recon-decider-0", 90_000, 12, CLUSTER)
    after = Fence("recon-decider-0", 3, 0, "a-new-cluster")
    await calls_begun.begin_many(conn, [a_call("zombie", 0.001)])
    assert await calls_begun.write_fence(conn, before)
    assert await calls_begun.write_fence(conn, after)  # written over, no hand needed
    await asyncio.sleep(0.01)  # nobody's lease is live
    assert await calls_begun.claim(conn, ROW, "old-cluster", 30.0, before) is Claimed.SUPERSEDED
    assert await calls_begun.claim(conn, ROW, "owner", 30.0, after) is Claimed.TAKEN
    # The two clusters at once: the earlier one's takes never win back, however large its
    # ids, and its fences stay refused; the later one's go on in their own order.
    assert not await calls_begun.write_fence(conn, Fence("recon-decider-0", 90_001, 0, CLUSTER))
    (begun,) = await calls_begun.begin_many(conn, [_fenced(a_call("old", 30.0), before, 2)])
    assert begun.superseded and not begun.written
    assert await calls_begun.write_fence(conn, Fence("recon-decider-0", 3, 1, "a-new-cluster"))
    assert await calls_begun.claim(conn, ROW, "owner", 30.0, after) is Claimed.SUPERSEDED
    # A cluster not registered yet (its take's write on its way) is not refused: it will be
    # the newest.
    unseen = Fence("recon-decider-0", 1, 0, "a-third-cluster")
    (begun,) = await calls_begun.begin_many(conn, [_fenced(a_call("third", 30.0), unseen, 3)])
    assert begun.written
    # Going back to the cluster the database left: the operator's statement
    # (docs/operations.md) makes it the newest again, and its next take wins.
    await conn.execute("UPDATE kafka_clusters SET arrival = DEFAULT WHERE cluster_id = $1", CLUSTER)
    assert await calls_begun.write_fence(conn, Fence("recon-decider-0", 90_002, 0, CLUSTER))
    assert await conn.fetchval("SELECT producer_id FROM call_fences") == 90_002


async def test_a_fence_written_before_clusters_were_named_is_read_as_the_readers_own_cluster(
    conn: asyncpg.Connection,
) -> None:
    # Migration 0013 left arrival 0 on the rows 0012 wrote (and a release before it writes
    # them so in a rolling upgrade): they still refuse an older take's claims, and a newer
    # take's write goes over them; an older one's does not.
    await calls_begun.begin_many(conn, [a_call("zombie", 0.001)])
    await conn.execute(
        "INSERT INTO call_fences (owner, producer_id, epoch) VALUES ('recon-decider-0', 7, 4)"
    )
    older, newer = Fence("recon-decider-0", 7, 3, CLUSTER), Fence("recon-decider-0", 7, 5, CLUSTER)
    assert not await calls_begun.write_fence(conn, older)
    await asyncio.sleep(0.01)
    assert await calls_begun.claim(conn, ROW, "zombie", 30.0, older) is Claimed.SUPERSEDED
    assert await calls_begun.write_fence(conn, newer)
    assert await conn.fetchval("SELECT arrival > 0 FROM call_fences")
    assert await calls_begun.claim(conn, ROW, "owner", 30.0, newer) is Claimed.TAKEN


def _fenced(call: calls_begun.Call, fence: Fence, attempt: int) -> calls_begun.Call:
    return dataclasses.replace(call, fence=fence, attempt=attempt)
