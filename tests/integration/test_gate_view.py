"""The dispatcher gate's view of the governance state, read by one statement every 0.2 s
(services.governance.store.in_force): a policy document is parsed again only when its
digest changed, a replaced one is seen at once, and the view says whether anything is held
(the claim of released dispatches is made only then). Real Postgres."""

import asyncio

import asyncpg
import pytest

from events.policy import PolicyDocument
from events.topics import Topics
from services.config import Settings
from services.dispatcher.gatekeeper import MAX_STALENESS_S, Gatekeeper
from services.governance import store
from services.governance.gate import Switch


def policy(version: int, grants: list[str]) -> PolicyDocument:
    return PolicyDocument.model_validate(
        {"version": version, "agents": {"agent-7": {"grants": grants}}}
    )


async def test_the_view_reads_a_changed_policy_keeps_an_unchanged_one_and_sees_holds(
    conn: asyncpg.Connection,
) -> None:
    empty = await store.in_force(conn, {})
    assert (empty.policies, empty.switches, empty.held) == ({}, {}, False)

    assert await store.replace_policy(conn, "demo", policy(1, ["payments.charge"]), "ops")
    assert await store.replace_policy(conn, "other", policy(1, ["email.send"]), "ops")
    first = await store.in_force(conn, {})
    assert first.policies["demo"][1] == policy(1, ["payments.charge"])
    assert first.policies["demo"][0] == store.policy_digest(policy(1, ["payments.charge"]))

    # Replaced: the new document at once; the other tenant's is the very object kept.
    assert await store.replace_policy(conn, "demo", policy(2, ["email.send"]), "ops")
    second = await store.in_force(conn, first.policies)
    assert second.policies["demo"][1] == policy(2, ["email.send"])
    assert second.policies["other"][1] is first.policies["other"][1]

    await store.engage(conn, "ks_1", "demo", {"operation": "payments.charge"}, "stop", "ops")
    await store.hold(
        conn,
        tenant="demo",
        tx_id="held-1",
        action="charge",
        op_key="k_held",
        attempt=1,
        agent_id="agent-7",
        provider="sandbox",
        operation="payments.charge",
        partition=0,
        envelope="{}",
        switch_ids=("ks_1",),
    )
    held = await store.in_force(conn, second.policies)
    assert held.switches == {"demo": [Switch("ks_1", operation="payments.charge")]}
    assert held.held


async def test_calls_that_find_the_view_too_old_together_share_one_read(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The calls of one committed transaction start together and all find the view older than
    # MAX_STALENESS_S (the 0.2 s loop late on a busy machine): one read serves them all.
    reads = 0
    real = store.in_force

    async def counted(
        conn: asyncpg.Connection, known: dict[str, tuple[str, PolicyDocument]]
    ) -> store.InForce:
        nonlocal reads
        reads += 1
        return await real(conn, known)

    monkeypatch.setattr(store, "in_force", counted)
    settings = Settings(
        kafka_bootstrap="", database_url=fresh_database, topics=Topics(""), environment="test"
    )
    gate = Gatekeeper(settings, None)  # no review is asked here: no producer
    try:
        await asyncio.gather(*(gate._fresh() for _ in range(8)))
        assert reads == 1
        # A view older than the bound is still read again, and a caller that asks for a
        # read begun after it (a newer policy version) still gets one.
        gate.refreshed_at -= MAX_STALENESS_S
        await gate._fresh()
        await gate.refresh()
        assert reads == 3
    finally:
        await gate.close()
