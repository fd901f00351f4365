"""A revocation releases the old owner's leases of the calls it had finished
(services.dispatcher.held_leases), so the new owner's take-over claims them at once instead
of waiting the lease out: a call that ends while its partition is owned releases nothing
(no statement per call), and another process's claim then waits, as it must while the
owner may still call again. A clean stop lets them go likewise, at `leave` and, for the
calls that end between `leave` and the drops, at `close`. And a claim that waits
for another holder gives up once its own process loses the partition (DispatchHost.owns):
the partition's next owner claims the call, or, for a resumed hold, the hold. A claim that
waited while its partition stays owned asks the live state again before its lookup
(call_plan.Awaited): a transaction failed meanwhile gets no call. And a zombie's redelivery
(a process that lost the partition and has not noticed) is refused once the partition's
owner took it after the zombie (services.dispatcher.call_fence): its stale state would
send a declined charge again after the owner failed the transaction; so is a zombie's first
send (a released hold its gate loop claimed), at its begin.

Real parts: Postgres, Kafka (each host's producer) and the sandbox provider as
a subprocess, through the production executor, gate and DispatchHost of each process."""

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Iterator

import asyncpg
import httpx
import pytest
from support.fence_takes import fence_recorded, taken_in_turn
from support.held_order import claim_held, hold_order
from support.sandbox_process import Sandbox, start_sandbox, stop
from test_calls_begun import TENANT, calls_to, charge

from events.definition import TxStatus
from events.inputs import OperationObserved
from events.topics import Topics
from services.config import Settings
from services.decider import dispatch_host
from services.decider.dispatch_host import Answer, DispatchHost
from services.dispatcher.call_fence import Fence
from services.dispatcher.call_lease import lease_s
from services.dispatcher.calls_begun import Claimed, claim
from services.dispatcher.dispatch_order import DispatchOrder
from services.dispatcher.executor import Executor
from services.governance import store
from services.kafka_setup import ensure_topics
from services.providers.http import ProviderHttp
from services.providers.registry import build_accounts
from transactions.finished import FinishedTransaction
from transactions.state import TransactionState

PROVIDER_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    running = start_sandbox(tmp_path_factory.mktemp("lease-revocation") / "sandbox.sqlite3")
    yield running
    stop(running.process)


class _Process:
    """One decider process's calls: its DispatchHost (one lease holder) and executor."""

    def __init__(self, settings: Settings, http: ProviderHttp, owned: set[int]) -> None:
        self.owned = owned
        self.answers: list[OperationObserved] = []
        # The live states its decider would hold (Decider._current), by transaction.
        self.states: dict[str, TransactionState | FinishedTransaction] = {}
        self.host = DispatchHost(
            settings, lambda: self.owned, self._answered, lambda _p, _t, tx: self.states.get(tx)
        )
        self.host.executor = Executor(
            build_accounts(http, settings), self.host.gate, self.host, self.host.leases
        )

    def _answered(self, answer: Answer) -> None:
        self.answers.append(answer.observation)

    async def call(self, order: DispatchOrder) -> None:
        assert self.host.executor is not None
        await self.host.executor.run(
            order,
            lambda: order.partition in self.owned,
            functools.partial(self.host._awaited, order),
        )


@pytest.fixture
async def processes(
    kafka_bootstrap: str, fresh_database: str, topic_prefix: str, provider: Sandbox
) -> AsyncIterator[tuple[_Process, _Process]]:
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=fresh_database,
        topics=Topics(topic_prefix),
        environment="test",
        providers={"sandbox": provider.url},
        provider_timeout_s=PROVIDER_TIMEOUT_S,
    )
    await ensure_topics(kafka_bootstrap, settings.topics)
    async with ProviderHttp(PROVIDER_TIMEOUT_S, connect_s=2.0) as http:
        old, new = _Process(settings, http, {0}), _Process(settings, http, set())
        for process in (old, new):  # an answer of a partition not owned goes to Kafka
            await process.host.producer.start()
        try:
            yield old, new
        finally:
            for process in (old, new):
                await process.host.producer.stop()
                await process.host.gate.close()


async def test_a_call_finished_before_the_revocation_is_claimed_by_the_new_owner_at_once(
    processes: tuple[_Process, _Process], fresh_database: str
) -> None:
    old, new = processes
    envelope, dispatch = charge("revoked-1", "k_revoked")
    order = DispatchOrder(envelope, dispatch, 0)
    row = (TENANT, dispatch.op_key, dispatch.leg.value, dispatch.attempt)

    # The old owner makes the call; it ends while the partition is still its own.
    await old.call(order)
    assert [a.outcome.value for a in old.answers] == ["succeeded"]
    conn = await asyncpg.connect(fresh_database)
    try:
        # No release at the call's end: the lease is still the old owner's, live.
        holder = await conn.fetchval("SELECT holder FROM calls_begun WHERE op_key = $1", row[1])
        assert holder == old.host.leases.holder
        assert await claim(conn, row, "someone-else", 1.0, None) is Claimed.HELD

        # The revocation: the partition is dropped, then its calls' leases let go; the
        # partition is the new owner's.
        old.owned.discard(0)
        await old.host.let_go({0})
        new.owned.add(0)

        # The new owner's take-over runs the unanswered dispatch again: a redelivery, so it
        # claims the call before its lookup. The old lease ran for
        # lease_s(PROVIDER_TIMEOUT_S, 1) = 12 s: a claim that waited it out would miss this.
        started = time.monotonic()
        async with asyncio.timeout(lease_s(PROVIDER_TIMEOUT_S, 1) / 3):
            await new.call(order)
        took = time.monotonic() - started
        holder = await conn.fetchval("SELECT holder FROM calls_begun WHERE op_key = $1", row[1])
        assert holder == new.host.leases.holder, "the new owner never claimed the call"
    finally:
        await conn.close()
    assert took < 2.0, f"the take-over waited {took:.1f} s for a lease the old owner let go"


async def _claimed_by(conn: asyncpg.Connection, op_key: str) -> str:
    return str(await conn.fetchval("SELECT holder FROM calls_begun WHERE op_key = $1", op_key))


async def _next_owner_takes(new: _Process, order: DispatchOrder, conn: asyncpg.Connection) -> float:
    """The next owner's take-over of the call, a redelivery that claims it before its
    lookup: how long it took (bounded at a third of the old 12 s lease, which a claim that
    waited it out would miss)."""
    new.owned.add(order.partition)
    started = time.monotonic()
    async with asyncio.timeout(lease_s(PROVIDER_TIMEOUT_S, 1) / 3):
        await new.call(order)
    took = time.monotonic() - started
    assert await _claimed_by(conn, order.dispatch.op_key) == new.host.leases.holder
    return took


async def test_a_clean_stop_lets_its_finished_calls_go_before_the_group_is_left(
    processes: tuple[_Process, _Process], fresh_database: str
) -> None:
    old, new = processes
    envelope, dispatch = charge("stopped-1", "k_stopped")
    order = DispatchOrder(envelope, dispatch, 0)

    # Made through the host, as a committed dispatch is; it ends while the partition is
    # its own, so its lease is kept.
    old.host.submit([order])
    async with asyncio.timeout(10):
        while old.host.tasks:
            await asyncio.sleep(0.01)
    assert [a.outcome.value for a in old.answers] == ["succeeded"]
    conn = await asyncpg.connect(fresh_database)
    try:
        assert await _claimed_by(conn, dispatch.op_key) == old.host.leases.holder

        # The decider's clean stop: `leave` before the group is left (the partitions go to
        # the next owners then), `close` only when the process's stack unwinds.
        await old.host.leave([])
        old.owned.discard(0)
        took = await _next_owner_takes(new, order, conn)
    finally:
        await conn.close()
        await old.host.close()
    assert took < 2.0, f"the next owner waited {took:.1f} s for a lease the stop let go"


async def test_close_lets_go_of_the_calls_that_ended_between_leave_and_the_drops(
    processes: tuple[_Process, _Process],
    fresh_database: str,
    provider: Sandbox,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A clean stop's `leave` waits LEAVE_WAIT_S for the calls in flight, then lets go of the
    # ended ones; a call still on the wire then and ending before the stop drops its
    # partition keeps its lease (owned when it ended), and only `close`'s let-go (after the
    # drops) releases it: without it the next owner waits the lease out.
    old, new = processes
    monkeypatch.setattr(dispatch_host, "LEAVE_WAIT_S", 0.1)
    async with httpx.AsyncClient(base_url=provider.url) as sandbox:
        armed = await sandbox.post(
            "/v1/faults",
            json={"operation": "payments.charge", "mode": "delay", "times": 1, "delay_ms": 1500},
        )
        armed.raise_for_status()
    envelope, dispatch = charge("closed-1", "k_closed")
    order = DispatchOrder(envelope, dispatch, 0)
    conn = await asyncpg.connect(fresh_database)
    try:
        old.host.submit([order])
        async with asyncio.timeout(10):  # begun: its apply is held at the sandbox
            while await _claimed_by(conn, dispatch.op_key) != old.host.leases.holder:
                await asyncio.sleep(0.01)
        await old.host.leave([])  # the call is still on the wire
        async with asyncio.timeout(10):  # it ends while partition 0 is still owned
            while old.host.tasks:
                await asyncio.sleep(0.01)
        assert await _claimed_by(conn, dispatch.op_key) == old.host.leases.holder
        assert await claim(conn, (TENANT, dispatch.op_key, "forward", 1), "x", 1.0, None) is (
            Claimed.HELD
        ), "released at its end: the window under test was not staged"

        old.owned.discard(0)  # the stop's drops
        await old.host.close()  # the process's stack unwinds
        took = await _next_owner_takes(new, order, conn)
    finally:
        await conn.close()
    assert took < 2.0, f"the next owner waited {took:.1f} s for a lease close let go"


async def _claim_waits(caplog: pytest.LogCaptureFixture) -> None:
    """Until the executor logs that a claim waits for another holder's call."""
    async with asyncio.timeout(10):
        while "waiting for it to end" not in caplog.text:
            await asyncio.sleep(0.01)


async def test_a_claim_that_waits_gives_up_once_its_partition_is_revoked(
    processes: tuple[_Process, _Process], fresh_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    old, new = processes
    envelope, dispatch = charge("given-up-1", "k_given_up")
    order = DispatchOrder(envelope, dispatch, 0)

    # The old owner's call ended; its lease is live (it died, or its release failed).
    await old.call(order)
    conn = await asyncpg.connect(fresh_database)
    try:
        assert await _claimed_by(conn, dispatch.op_key) == old.host.leases.holder

        # The new owner's take-over: a redelivery, whose claim waits for the old lease.
        new.owned.add(0)
        with caplog.at_level(logging.INFO, logger="services.dispatcher.executor"):
            new.host.submit([order])
            await _claim_waits(caplog)

            # It loses the partition in turn: its claim ends within a poll, not when the
            # old lease lapses (12 s after the old call's begin).
            new.owned.discard(0)
            started = time.monotonic()
            async with asyncio.timeout(lease_s(PROVIDER_TIMEOUT_S, 1) / 4):
                while new.host.tasks:
                    await asyncio.sleep(0.01)
            took = time.monotonic() - started
        assert "no longer this process's to make; not called" in caplog.text

        # Nothing taken, nothing sent, nothing reported: the row is the old holder's still,
        # for the partition's next owner to claim.
        assert await _claimed_by(conn, dispatch.op_key) == old.host.leases.holder
        assert new.answers == []
    finally:
        await conn.close()
    assert took < 1.0, f"the claim went on waiting {took:.1f} s for a call not its own"


async def test_a_resumed_hold_whose_claim_waits_is_left_to_the_new_owner_once_revoked(
    processes: tuple[_Process, _Process], fresh_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A resumed hold's call follows the one rule too (DispatchHost.owns): before stop 48 it
    # waited out the other holder's lease after the revocation, then looked up and called on
    # its resumer's judgement of the transaction from before it, which only the new owner
    # can make now (a person may have failed the transaction meanwhile).
    old, resumer = processes
    envelope, dispatch = charge("held-given-up-1", "k_held_given_up")
    order = DispatchOrder(envelope, dispatch, 0)

    # Another process's call of the attempt ended; its lease is live.
    await old.call(order)
    conn = await asyncpg.connect(fresh_database)
    try:
        await hold_order(conn, order)
        # The owner of partition 0 claims the released hold and resumes it: its call was
        # begun, so its claim waits for the other lease.
        resumer.owned.add(0)
        held = await claim_held(conn, resumer.host.gate.claimer)
        with caplog.at_level(logging.INFO, logger="services.dispatcher.executor"):
            resume = asyncio.create_task(resumer.host._resume([held]))
            await _claim_waits(caplog)
            resumer.owned.discard(0)  # the revocation
            async with asyncio.timeout(lease_s(PROVIDER_TIMEOUT_S, 1) / 4):
                await resume
        assert "no longer this process's to make; not called" in caplog.text

        # Nothing taken, sent or reported; the hold kept, its claim free for the new owner.
        assert await _claimed_by(conn, dispatch.op_key) == old.host.leases.holder
        assert resumer.answers == []
        by_new_owner = await store.claim_released(conn, 60.0, claimer="next", partitions=[0])
        assert [h.op_key for h in by_new_owner] == [dispatch.op_key]
    finally:
        await conn.close()


async def _begun_unsent(process: _Process, order: DispatchOrder) -> None:
    """A call `process` began and never sent (paused before its apply), or whose provider
    declined it: its row, under its lease, and nothing at the provider."""
    begun = await process.host.gate.begin(
        order.envelope,
        order.dispatch,
        process.host.leases.holder,
        lease_s(PROVIDER_TIMEOUT_S, 1),
        process.host.leases.fence(order.partition),
    )
    assert begun.written


def _failed(tx_id: str) -> FinishedTransaction:
    """The marker of a transaction the owner decided failed (a person, or a compensation)."""
    return FinishedTransaction(
        tenant=TENANT, tx_id=tx_id, status=TxStatus.FAILED, fingerprint="f", seq=9, last_hash="h"
    )


async def test_a_claim_that_waited_is_not_called_once_its_transaction_failed_meanwhile(
    processes: tuple[_Process, _Process],
    fresh_database: str,
    provider: Sandbox,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A zombie began the charge and never sent it (paused before its apply), its lease
    # live; the partition's owner's take-over claims the call, waiting for that lease
    # (12-32 s at the default provider timeout). Meanwhile a person fails the transaction
    # (the reconciler looked the begun leg up, found nothing, asked for review). The wait
    # over, a lookup would find nothing and, a charge not being destructive, send it: an
    # effect after the transaction failed. Asked again, the live state stops it.
    zombie, owner = processes
    envelope, dispatch = charge("failed-meanwhile-1", "k_failed_meanwhile")
    order = DispatchOrder(envelope, dispatch, 0)
    zombie.owned.discard(0)
    await _begun_unsent(zombie, order)
    conn = await asyncpg.connect(fresh_database)
    try:
        owner.owned.add(0)
        with caplog.at_level(logging.INFO, logger="services.dispatcher.executor"):
            owner.host.submit([order])
            await _claim_waits(caplog)
            # The person's failure, decided by the owner while its claim waits.
            owner.states[envelope.tx_id] = _failed(envelope.tx_id)
            # The zombie's lease ends (let go, or lapsed): the owner's claim takes the call.
            row = (TENANT, dispatch.op_key, dispatch.leg.value, dispatch.attempt)
            await zombie.host.gate.release_many([(row, zombie.host.leases.holder)])
            async with asyncio.timeout(10):
                while owner.host.tasks:
                    await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=provider.url) as sandbox:
            assert await calls_to(sandbox, dispatch.op_key) == [], "called after it failed"
        assert owner.answers == []
        assert "no longer awaited by its transaction; not called" in caplog.text
        # Its lease taken and kept, as any ended call's (let go when the partition is).
        assert await _claimed_by(conn, dispatch.op_key) == owner.host.leases.holder
    finally:
        await conn.close()


async def _zombie_took(zombie: _Process) -> Fence:
    """Partition 0 taken by the zombie, then by the owner, with the real fences of its
    producer initialised in turn: the zombie's is its own; the owner's is answered, for
    `_owner_takes`."""
    zombie_took, owner_took = await taken_in_turn(zombie.host.settings, 0, 2)
    assert zombie_took < owner_took
    zombie.host.fenced(0, zombie_took)
    return owner_took


async def _owner_takes(conn: asyncpg.Connection, owner: _Process, took: Fence) -> None:
    """The owner's take of partition 0: owned, and its fence written (DispatchHost.fenced's
    task, which its take starts before its take-over calls)."""
    owner.owned.add(0)
    owner.host.fenced(0, took)
    await fence_recorded(conn, took)


async def _zombie_redelivers(
    zombie: _Process, order: DispatchOrder, caplog: pytest.LogCaptureFixture
) -> None:
    """The zombie's redelivery of `order` (a retry of its plan, or `again`), run to its end
    through its DispatchHost, the executor's lines captured."""
    with caplog.at_level(logging.INFO, logger="services.dispatcher.executor"):
        zombie.host.submit([order])
        async with asyncio.timeout(10):
            while zombie.host.tasks:
                await asyncio.sleep(0.01)


async def test_a_zombies_redelivery_is_not_called_once_the_partitions_owner_took_it(
    processes: tuple[_Process, _Process],
    fresh_database: str,
    provider: Sandbox,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # docs/decider.md, "A zombie's resend": the zombie began the charge, which the provider
    # declined (or it never sent it): nothing at the provider. It stalled past its session;
    # the group gave the partition to the owner, whose take-over sent the charge again,
    # declined again, and failed the transaction. The owner's lease on the call ended. The
    # zombie wakes still believing the partition its own (`owned`), its state stale (it
    # waits on the charge), and redelivers the call (a retry of its plan, or `again`): its
    # claim takes the call at once, its lookup finds nothing, and a charge not being
    # destructive, it would send it again, after the transaction failed, relying on the
    # provider repeating its refusal. The owner's fence refuses it.
    zombie, owner = processes
    envelope, dispatch = charge("zombie-1", "k_zombie")
    order = DispatchOrder(envelope, dispatch, 0)
    row = (TENANT, dispatch.op_key, dispatch.leg.value, dispatch.attempt)
    owner_took = await _zombie_took(zombie)
    await _begun_unsent(zombie, order)
    conn = await asyncpg.connect(fresh_database)
    try:
        await _owner_takes(conn, owner, owner_took)
        owner.states[envelope.tx_id] = _failed(envelope.tx_id)
        # Nobody's lease is live any more (the owner's ended; the zombie's lapsed).
        await conn.execute("UPDATE calls_begun SET held_until = NULL")
        assert zombie.owned == {0}, "the zombie has not noticed"
        await _zombie_redelivers(zombie, order, caplog)
        async with httpx.AsyncClient(base_url=provider.url) as sandbox:
            assert await calls_to(sandbox, dispatch.op_key) == [], "a zombie called again"
        assert zombie.answers == []
        assert "the partition's owner took it after this process; not called" in caplog.text
        # Nothing taken: the row is as the owner left it.
        assert await conn.fetchval("SELECT held_until FROM calls_begun") is None
        assert row[1] == await conn.fetchval("SELECT op_key FROM calls_begun")
    finally:
        await conn.close()


async def test_a_zombies_first_send_of_a_released_hold_is_not_begun(
    processes: tuple[_Process, _Process],
    fresh_database: str,
    provider: Sandbox,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A switch held the charge (no row: its begin was stopped) and a person failed the
    # transaction at the owner. The switch released, the zombie's gate loop, which claims
    # the holds of the partitions it believes its own, claims it first and judges it by its
    # stale state (it waits): its begin would write the row and send the charge, a first
    # send after the transaction failed. The owner's fence refuses the begin, and the
    # hold's claim is released for the owner's loop.
    zombie, owner = processes
    envelope, dispatch = charge("zombie-hold-1", "k_zombie_hold")
    order = DispatchOrder(envelope, dispatch, 0)
    owner_took = await _zombie_took(zombie)
    conn = await asyncpg.connect(fresh_database)
    try:
        await _owner_takes(conn, owner, owner_took)
        owner.states[envelope.tx_id] = _failed(envelope.tx_id)
        await hold_order(conn, order)
        held = await claim_held(conn, zombie.host.gate.claimer)
        with caplog.at_level(logging.INFO, logger="services.dispatcher.executor"):
            async with asyncio.timeout(10):
                await zombie.host._resume([held])
        async with httpx.AsyncClient(base_url=provider.url) as sandbox:
            assert await calls_to(sandbox, dispatch.op_key) == [], "a zombie called"
        assert zombie.answers == []
        assert "the partition's owner took it after this process; not begun" in caplog.text
        assert await conn.fetchval("SELECT count(*) FROM calls_begun") == 0
        by_owner = await store.claim_released(conn, 60.0, claimer="owner", partitions=[0])
        assert [h.op_key for h in by_owner] == [dispatch.op_key]
    finally:
        await conn.close()


async def test_brokers_replaced_the_new_clusters_owner_calls_and_the_old_clusters_zombie_not(
    processes: tuple[_Process, _Process],
    fresh_database: str,
    provider: Sandbox,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # docs/operations.md, "Replacing the brokers under one database": the database served
    # another Kafka cluster first, whose producer ids had grown far past the new brokers'.
    # Its last owner of partition 0 never reached the new brokers: a zombie, its take's
    # fence (written as that cluster's) in `call_fences`. The new cluster's owner takes the
    # partition with a real, much smaller token (the test broker's): its fence is written
    # and its call made, with no row deleted by hand; the old cluster's zombie, which would
    # compare as newer by its numbers alone, is refused.
    zombie, owner = processes
    envelope, dispatch = charge("moved-1", "k_moved")
    order = DispatchOrder(envelope, dispatch, 0)
    (took,) = await taken_in_turn(owner.host.settings, 0, 1)
    replaced = Fence(took.owner, took.producer_id + 10**9, 7, "a-replaced-kafka-cluster")
    conn = await asyncpg.connect(fresh_database)
    try:
        zombie.host.fenced(0, replaced)  # the old cluster's take
        await fence_recorded(conn, replaced)
        await _owner_takes(conn, owner, took)
        await owner.call(order)
        assert [a.outcome.value for a in owner.answers] == ["succeeded"]
        async with httpx.AsyncClient(base_url=provider.url) as sandbox:
            made = await calls_to(sandbox, dispatch.op_key)
        assert [kind for kind, _ in made] == ["apply"], made
        # The zombie redelivers once nobody's lease is live: refused, nothing asked.
        await conn.execute("UPDATE calls_begun SET held_until = NULL")
        await _zombie_redelivers(zombie, order, caplog)
        async with httpx.AsyncClient(base_url=provider.url) as sandbox:
            assert await calls_to(sandbox, dispatch.op_key) == made, "the old cluster called"
        assert zombie.answers == []
        assert "the partition's owner took it after this process; not called" in caplog.text
        # Its take's write, retried late (Postgres was away for it), does not win back.
        assert not await zombie.host.gate.write_fence(replaced)
        await fence_recorded(conn, took)
    finally:
        await conn.close()
