"""Issue 18, items 11, 12 and 18: a dispatch is a redelivery when its call was begun (a
durable record written right before the call), not when its offset is old; the kill switch
is judged by the statement that writes that record, after lookups and preconditions; and a
resumed held dispatch keeps its claim for as long as its call runs.

Real parts: Postgres, Kafka (the observations a call reports) and the sandbox provider as a
subprocess, called through the production adapters."""

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import asyncpg
import httpx
import pytest
from support.begun_by import DEAD_HOLDER, LAPSED_S
from support.kafka_executor import KafkaExecutor
from support.sandbox_process import Sandbox, start_sandbox, stop

from events.definition import Leg
from events.envelope import GENESIS_HASH, Envelope, seal
from events.topics import Topics
from events.transaction_events import OperationDispatched
from services.config import Settings
from services.devtools.sandbox.call_pages import every_call
from services.dispatcher import call_plan, calls_begun, gatekeeper
from services.dispatcher.gatekeeper import Gatekeeper
from services.governance import store
from services.kafka_setup import ensure_topics
from services.providers.http import ProviderHttp
from services.providers.registry import build_accounts

TENANT = "demo"


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    running = start_sandbox(tmp_path_factory.mktemp("calls-begun") / "sandbox.sqlite3")
    yield running
    stop(running.process)


def charge(tx_id: str, op_key: str) -> tuple[Envelope, OperationDispatched]:
    return sealed(
        tx_id,
        OperationDispatched(
            action="charge",
            leg=Leg.FORWARD,
            op_key=op_key,
            attempt=1,
            lookup_first=False,
            provider="sandbox",
            operation="payments.charge",
            payload={"amount": 1299, "currency": "usd", "customer": "cus_1"},
        ),
    )


def promotion(tx_id: str, op_key: str) -> tuple[Envelope, OperationDispatched]:
    """A destructive call (a second promotion moves the user up a second place)."""
    return sealed(
        tx_id,
        OperationDispatched(
            action="promote",
            leg=Leg.FORWARD,
            op_key=op_key,
            attempt=1,
            lookup_first=False,
            provider="sandbox",
            operation="waitlist.promote",
            payload={"resource": "class-0700", "user": "u_1"},
        ),
    )


def sealed(tx_id: str, dispatch: OperationDispatched) -> tuple[Envelope, OperationDispatched]:
    [envelope] = seal(
        tenant=TENANT,
        tx_id=tx_id,
        last_seq=0,
        last_hash=GENESIS_HASH,
        events=[dispatch],
        causation_id="test",
        occurred_at=datetime.now(UTC),
    )
    return envelope, dispatch


async def begin(conn: asyncpg.Connection, op_key: str) -> call_plan.Begun:
    return await calls_begun.begin(
        conn,
        tenant=TENANT,
        tx_id="begun-1",
        op_key=op_key,
        leg="forward",
        attempt=1,
        agent_id="agent-7",
        provider="sandbox",
        operation="payments.charge",
        holder=DEAD_HOLDER,
        lease_s=LAPSED_S,
        fence=None,
    )


async def test_a_switch_engaged_before_the_call_is_begun_stops_it_and_nothing_is_recorded(
    conn: asyncpg.Connection,
) -> None:
    # Given a switch on charges whose 201 was answered (its row committed)
    await store.engage(conn, "ks_1", TENANT, {"operation": "payments.charge"}, "stop", "ops")
    await store.engage(conn, "ks_other", "other", {}, "another tenant's", "ops")
    # When a dispatcher is about to call, however old its cached view of the switches
    held = await begin(conn, "k_switched")
    # Then the call is not begun, and the switch that stopped it is named
    assert held == call_plan.Begun(switches=("ks_1",), written=False)
    assert not await calls_begun.was_begun(conn, TENANT, "k_switched", "forward", 1)

    # Once released, the call is begun exactly once; a second begin finds the record.
    assert await store.release(conn, TENANT, "ks_1", "ops") is not None
    assert await begin(conn, "k_switched") == call_plan.Begun(switches=(), written=True)
    assert await calls_begun.was_begun(conn, TENANT, "k_switched", "forward", 1)
    begun_before = call_plan.Begun(switches=(), written=False, existed=True)
    assert await begin(conn, "k_switched") == begun_before
    # The same statement says the call was begun before whatever the switches, so a
    # redelivery is looked up even while a switch is engaged (its next begin holds it).
    await store.engage(conn, "ks_2", TENANT, {}, "stop all", "ops")
    assert await begin(conn, "k_switched") == call_plan.Begun(
        switches=("ks_2",), written=False, existed=True
    )


def a_call(op_key: str, operation: str = "payments.charge") -> calls_begun.Call:
    return calls_begun.Call(
        tenant=TENANT,
        tx_id="begun-1",
        op_key=op_key,
        leg="forward",
        attempt=1,
        agent_id="agent-7",
        provider="sandbox",
        operation=operation,
        holder=DEAD_HOLDER,
        lease_s=LAPSED_S,
        fence=None,
    )


async def test_calls_begun_together_are_each_judged_as_alone_and_one_asked_twice_is_begun_once(
    conn: asyncpg.Connection,
) -> None:
    """The begins a host asks at once (the calls one transaction committed) are one
    statement: each call answered as its own statement would answer it, and a call asked
    twice in one batch (a zombie's and a take-over's) written once, the second finding it
    begun, so only one of them calls."""
    await store.engage(conn, "ks_1", TENANT, {"operation": "payments.refund"}, "stop", "ops")
    assert await begin(conn, "k_before") == call_plan.Begun(switches=(), written=True)
    calls = [
        a_call("k_new"),
        a_call("k_twice"),
        a_call("k_before"),
        a_call("k_refund", operation="payments.refund"),
        a_call("k_twice"),
    ]
    assert await calls_begun.begin_many(conn, calls) == [
        call_plan.Begun(switches=(), written=True),
        call_plan.Begun(switches=(), written=True),
        call_plan.Begun(switches=(), written=False, existed=True),
        call_plan.Begun(switches=("ks_1",), written=False),
        call_plan.Begun(switches=(), written=False, existed=True),
    ]
    assert await calls_begun.begin_many(conn, []) == []


@asynccontextmanager
async def dispatcher_with_lookups_down(
    kafka_bootstrap: str, database_url: str, topic_prefix: str, provider: Sandbox
) -> AsyncIterator[tuple[KafkaExecutor, httpx.AsyncClient]]:
    """A production dispatcher against the sandbox, whose charge lookups answer 503 until
    the test disarms them: only the call-begun record can tell it what to do."""
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=database_url,
        topics=Topics(topic_prefix),
        environment="test",
        providers={"sandbox": provider.url},
    )
    await ensure_topics(kafka_bootstrap, settings.topics)
    async with httpx.AsyncClient(base_url=provider.url) as sandbox:
        armed = await sandbox.post(
            "/v1/faults",
            json={"operation": "payments.charge", "mode": "lookup_unavailable", "times": 20},
        )
        assert armed.status_code < 300, armed.text
        async with ProviderHttp(5.0, connect_s=2.0) as http:
            dispatcher = KafkaExecutor(settings, build_accounts(http, settings))
            await dispatcher.producer.start()
            try:
                yield dispatcher, sandbox
            finally:
                await dispatcher.gate.close()
                await dispatcher.producer.stop()
                await sandbox.delete("/v1/faults")


async def effects_under(sandbox: httpx.AsyncClient, key: str) -> list[dict[str, object]]:
    await sandbox.delete("/v1/faults")  # the witness is the provider's own lookup
    response = await sandbox.get("/v1/effects", params={"idempotency_key": key})
    effects: list[dict[str, object]] = response.json()["effects"]
    return effects


async def test_a_dispatch_nobody_began_is_sent_even_when_the_provider_cannot_be_asked(
    conn: asyncpg.Connection,
    kafka_bootstrap: str,
    fresh_database: str,
    topic_prefix: str,
    provider: Sandbox,
) -> None:
    """The dispatch a restarted dispatcher reads below its assignment's end offset, which no
    dispatcher ever called: with lookups unavailable, judging it by its offset (look up
    first) would never make the call and lose a legitimate effect to a review."""
    async with dispatcher_with_lookups_down(
        kafka_bootstrap, fresh_database, topic_prefix, provider
    ) as (dispatcher, sandbox):
        envelope, dispatch = charge("begun-1", "k_never_begun")
        await dispatcher.call(envelope, dispatch, 0)
        effects = await effects_under(sandbox, "k_never_begun")
        assert len(effects) == 1, effects
        assert await dispatcher.gate.was_begun(envelope, dispatch)


async def test_a_dispatch_whose_call_was_begun_is_looked_up_first_and_not_sent_blind(
    conn: asyncpg.Connection,
    kafka_bootstrap: str,
    fresh_database: str,
    topic_prefix: str,
    provider: Sandbox,
) -> None:
    """A held dispatch claimed again after its resumer died mid-call (or a dispatch whose
    owner died after beginning it): the record says a call may have been made, so it is a
    redelivery even when nothing about its offset or its claim says so."""
    assert await begin(conn, "k_begun_before") == call_plan.Begun(switches=(), written=True)
    async with dispatcher_with_lookups_down(
        kafka_bootstrap, fresh_database, topic_prefix, provider
    ) as (dispatcher, sandbox):
        envelope, dispatch = charge("begun-2", "k_begun_before")
        await dispatcher.call(envelope, dispatch, 0)
        # Lookups unavailable: the outcome stays unknown for later lookups; no blind call.
        assert await effects_under(sandbox, "k_begun_before") == []


async def test_a_redelivered_destructive_call_is_looked_up_and_never_sent_again(
    conn: asyncpg.Connection,
    kafka_bootstrap: str,
    fresh_database: str,
    topic_prefix: str,
    provider: Sandbox,
) -> None:
    """A first send asks whether its call was begun in the statement that begins it (no
    separate question): a destructive call whose row is found there is looked up, and,
    found absent (the first call may still land), never sent."""
    async with dispatcher_with_lookups_down(
        kafka_bootstrap, fresh_database, topic_prefix, provider
    ) as (dispatcher, sandbox):
        await sandbox.delete("/v1/faults")  # lookups answer: the key holds no effect
        # A first send is one begin, then the call.
        envelope, dispatch = promotion("begun-3", "k_promote_first")
        await dispatcher.call(envelope, dispatch, 0)
        assert [kind for kind, _ in await calls_to(sandbox, "k_promote_first")] == ["apply"]
        # Begun before, by a dispatcher that died before its call arrived.
        envelope, dispatch = promotion("begun-4", "k_promote_begun")
        assert (
            await dispatcher.gate.begin(envelope, dispatch, DEAD_HOLDER, LAPSED_S, None)
        ).written
        await dispatcher.call(envelope, dispatch, 0)
        assert await calls_to(sandbox, "k_promote_begun") == [("lookup", "absent")]


async def calls_to(sandbox: httpx.AsyncClient, key: str) -> list[tuple[str, str]]:
    """The calls the sandbox (`sandbox`'s base URL) answered under `key`, every page read."""
    listed = await every_call(sandbox, str(sandbox.base_url).rstrip("/"), key)
    return [(c["kind"], c["outcome"]) for c in listed]


async def test_a_resumed_hold_keeps_its_claim_while_its_call_outlasts_the_lease(
    conn: asyncpg.Connection,
    fresh_database: str,
    kafka_bootstrap: str,
    topic_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Renewed six times a lease, and the gate's pool made before the claim: on a loaded
    # machine a first connection or a late wake-up must not eat the whole lease (CI saw a
    # 0.6 s lease lapse while a 0.1 s renewal waited on the pool being made).
    monkeypatch.setattr(gatekeeper, "HOLD_LEASE_S", 1.5)
    monkeypatch.setattr(gatekeeper, "HOLD_RENEW_S", 0.25)
    await hold_charge(conn, "held-1", "k_held")
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=fresh_database,
        topics=Topics(topic_prefix),
        environment="test",
    )
    gate = Gatekeeper(settings, producer=None)  # never produces here
    await gate._pool()
    claimed = await store.claim_released(
        conn,
        gatekeeper.HOLD_LEASE_S,
        gatekeeper.RESUME_BATCH,
        claimer=gate.claimer,
        partitions=[0],
    )
    assert [h.op_key for h in claimed] == ["k_held"]
    claimed_by_another: list[list[str]] = []

    async def slow_call(released: list[store.Held]) -> None:
        # A call three leases long: a second dispatcher keeps trying to claim the row.
        for _ in range(9):
            await asyncio.sleep(0.5)
            again = await store.claim_released(conn, 60.0, claimer="another", partitions=[0])
            claimed_by_another.append([h.op_key for h in again])

    try:
        await gate._resume_leased(slow_call, claimed)
    finally:
        await gate.close()
    assert claimed_by_another == [[]] * 9


async def test_a_resume_forgets_only_a_hold_whose_claim_is_still_its_own(
    conn: asyncpg.Connection,
) -> None:
    # A resumer (A) whose call was held again (a switch engaged meanwhile: the hold written
    # again clears its claim), then the switch released and another dispatcher (B) claimed
    # it, and B dies before its call. A's resume ends and forgets its hold: B's row must
    # stay, or nobody ever calls the leg (the take-over leaves held legs to the resume).
    await hold_charge(conn, "held-2", "k_held_again")
    (by_a,) = await store.claim_released(conn, 60.0, claimer="a", partitions=[0])
    await hold_charge(conn, "held-2", "k_held_again")  # A's call held again
    (by_b,) = await store.claim_released(conn, 60.0, claimer="b", partitions=[0])
    await store.renew_claims(conn, [by_a], 60.0)  # A's renewal takes nothing back
    await store.forget_held(conn, by_a)  # A's resume ends
    held = await store.held_on(conn, 0)
    assert (TENANT, "k_held_again", 1) in held, "A forgot the hold B claimed"
    claimed_by = await conn.fetchval(
        "SELECT claimed_by FROM held_dispatches WHERE op_key = 'k_held_again'"
    )
    assert claimed_by == "b"
    await store.forget_held(conn, by_b)
    assert (TENANT, "k_held_again", 1) not in await store.held_on(conn, 0)


async def test_a_released_hold_is_claimed_only_by_its_partition_s_owner(
    conn: asyncpg.Connection,
) -> None:
    # Only the owner of a hold's partition knows whether its transaction still waits on it
    # (a person may have failed it after a crashed resumer began the held leg): a decider
    # that owns other partitions must not claim it, or it would call a finished
    # transaction's leg (the simulator's seed 851, across processes).
    await hold_charge(conn, "held-3", "k_on_0", partition=0)
    await hold_charge(conn, "held-4", "k_on_1", partition=1)
    by_owner_of_1 = await store.claim_released(conn, 60.0, claimer="c", partitions=[1, 2])
    assert [h.op_key for h in by_owner_of_1] == ["k_on_1"]
    assert await store.claim_released(conn, 60.0, claimer="d", partitions=[2, 3]) == []
    by_owner_of_0 = await store.claim_released(conn, 60.0, claimer="e", partitions=[0])
    assert [h.op_key for h in by_owner_of_0] == ["k_on_0"]


async def hold_charge(
    conn: asyncpg.Connection, tx_id: str, op_key: str, *, partition: int = 0
) -> None:
    """A charge's first attempt held by switch ks_1 (released: none is engaged here)."""
    await store.hold(
        conn,
        tenant=TENANT,
        tx_id=tx_id,
        action="charge",
        op_key=op_key,
        attempt=1,
        agent_id="agent-7",
        provider="sandbox",
        operation="payments.charge",
        partition=partition,
        envelope="{}",
        switch_ids=("ks_1",),
    )


def test_the_resume_batch_fits_the_lease() -> None:
    # One wave of concurrent calls, each bounded by the provider timeout and the lookups.
    assert gatekeeper.RESUME_BATCH <= 64
    assert gatekeeper.HOLD_RENEW_S * 2 < gatekeeper.HOLD_LEASE_S
