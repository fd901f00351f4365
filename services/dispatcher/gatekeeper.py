"""The policy gate at the last moment before a provider call: kill switches, grants and
quotas (services.governance.gate), for every dispatch whatever started it (a submission's
step, a saga compensation, a review `retry`, a lookup-first re-send).

- Kill switches: the engaged switches are re-read from Postgres every
  `KILL_SWITCH_REFRESH_S` (a view at most `MAX_STALENESS_S` old holds most work early), but
  the judge is `begin`: right before the provider call, after any lookup and precondition,
  one statement checks the engaged switches and writes the durable "about to call" record
  (services.dispatcher.calls_begun), so from the API's 201 on no new call for the switch's
  scope is begun anywhere. A stopped dispatch is held (`held_dispatches`) and its offset
  committed like any other; the `run` loop dispatches held work once no switch matches it,
  claimed with a lease renewed while the calls run and in batches sized to it, so a
  dispatcher that dies lets another take it, and a live one never loses it mid-call. A
  claimed row is a redelivery exactly when its call was begun. In-flight calls are not
  interrupted: they settle and are reconciled as usual.
- Policies: a dispatch is judged by a view at least as new as the policy version its
  submission was checked under (the intake writes it on the intent row; an older view is
  re-read first), so a policy is in force for every submission accepted after its PUT
  answered, even one sent at once.
- Grants: a forward leg whose operation the agent is no longer granted (the policy changed
  after the submission) is held for a person: a RequestReview with reason `not_granted`.
- Tasks: the authority an intent acts under (the task its submission named, on the intent
  row) is re-judged here, in the same verdict and on the same view as grants and kill
  switches: a task revoked or expired since the submission stops the forward call, sent to
  a person (`task_unknown`, `task_expired`, or `not_granted` for its grants or amount).
- Quotas: reserved in Postgres (services.governance.store.reserve_quota) before the call;
  one that would be exceeded trips the breaker and asks for review (`quota_exceeded`). The
  reservation is written before the call: a crash between the two leaves the quota counted
  for a call that may never have been made, never a call that was not counted, and the
  re-delivered dispatch finds its claim (by key) and is not counted twice.
"""

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Callable, Collection, Coroutine, Iterable
from datetime import UTC, datetime

import asyncpg
from aiokafka import AIOKafkaProducer

from events.definition import Leg
from events.envelope import Envelope
from events.inputs import Evidence, RequestReview
from events.keys import gate_review_id, partition_key
from events.legacy_facts import recorded_facts
from events.policy import PolicyDocument, open_policy
from events.transaction_events import OperationDispatched
from services.at_least_once import RetryBatch
from services.closing import stop_each
from services.config import Settings
from services.dispatcher import call_plan, calls_begun, held_leases
from services.dispatcher.call_fence import Fence
from services.dispatcher.statement_batch import StatementBatch
from services.governance import store
from services.governance.gate import (
    Switch,
    Verdict,
    amount_of,
    counts_amount,
    dispatch_verdict,
    quotas_for,
)
from services.metrics import KILL_SWITCHES_ENGAGED
from services.pg_pool import UNREACHABLE, create_pool
from services.providers.registry import catalog_of

log = logging.getLogger(__name__)

KILL_SWITCH_REFRESH_S = 0.2
MAX_STALENESS_S = 0.5
HOLD_LEASE_S = 60.0
# Renewed this often while a resume runs: two renewals may fail before the lease lapses.
HOLD_RENEW_S = HOLD_LEASE_S / 3
# Held dispatches resumed at once: one wave of the dispatcher's concurrent calls
# (executor.MAX_CONCURRENT_CALLS), so a claimed row waits for at most one call before its own.
RESUME_BATCH = 64
_INTENTS_CACHED = 10_000

Resume = Callable[[list[store.Held]], Coroutine[None, None, None]]


class Gatekeeper:
    def __init__(self, settings: Settings, producer: AIOKafkaProducer) -> None:
        self.settings = settings
        self.producer = producer
        self.pool: asyncpg.Pool | None = None
        self.begin_pool: asyncpg.Pool | None = None  # calls_begun.open_begin_pool
        self.policies: dict[str, PolicyDocument] = {}
        # The same documents with their digests: a refresh parses only a changed one.
        self.digested: dict[str, tuple[str, PolicyDocument]] = {}
        self.switches: dict[str, list[Switch]] = {}
        # Whether the last refresh saw any held dispatch (of any dispatcher).
        self.any_held = True
        self.refreshed_at = float("-inf")
        self.intents: dict[tuple[str, str], store.Authority] = {}
        self.held = 0
        # This dispatcher's name on the held dispatches it claims (store.claim_released).
        self.claimer = uuid.uuid4().hex
        self._refreshing: asyncio.Lock = asyncio.Lock()
        # The questions the calls started together ask at once, one statement each
        # (services.dispatcher.statement_batch).
        self._intent_reads = StatementBatch(self._read_intents)
        # The intent reads in flight (`_intent_read`): one per transaction, whoever asks.
        self._reading: dict[tuple[str, str], asyncio.Future[store.Authority]] = {}
        self._begins = StatementBatch(self._begin_many)
        # Held while a pool is opened or closed. The pools open on first use, and the calls
        # of several partitions start together at a take: each saw no pool and opened one,
        # and all but the last were never closed (their connections held for the life of
        # the process; tests/integration/test_gate_pools_opened_once.py).
        self._opening = asyncio.Lock()

    async def close(self) -> None:
        # Under the lock: a pool still being opened is closed once open, not left behind.
        async with self._opening:
            pools = (self.pool, self.begin_pool)
            await stop_each(*(pool.close for pool in pools if pool is not None))

    async def _pool(self) -> asyncpg.Pool:
        if self.pool is None:
            async with self._opening:
                if self.pool is None:
                    # Without asyncpg's reset round trip per release (services.pg_pool):
                    # the governance store takes transaction-scoped advisory locks only.
                    url = self.settings.database_url
                    self.pool = await create_pool(url, min_size=1, max_size=4)
        return self.pool

    async def _begin_pool(self) -> asyncpg.Pool:
        if self.begin_pool is None:
            async with self._opening:
                if self.begin_pool is None:
                    url = self.settings.database_url
                    self.begin_pool = await calls_begun.open_begin_pool(url)
        return self.begin_pool

    async def refresh(self, within: float = 0.0) -> None:
        """Re-reads the view, unless a read begun since this call, or (`within`) one begun
        at most that many seconds before the lock is free, is there already."""
        started = time.monotonic()
        async with self._refreshing:
            # The calls a transaction's dispatches start together all find a view too old
            # at once: without `within` each read it again in turn, one statement after the
            # other (a c30 run on a loaded machine read it 2.7 times per transaction).
            if self.refreshed_at >= min(started, time.monotonic() - within):
                return  # someone refreshed while this one waited
            pool = await self._pool()
            async with pool.acquire() as conn:
                view = await store.in_force(conn, self.digested)
            self.digested, self.switches = view.policies, view.switches
            self.policies = {tenant: document for tenant, (_, document) in view.policies.items()}
            self.any_held, self.refreshed_at = view.held, started
        KILL_SWITCHES_ENGAGED.set(sum(len(engaged) for engaged in view.switches.values()))

    async def _fresh(self) -> None:
        if time.monotonic() - self.refreshed_at > MAX_STALENESS_S:
            try:
                await self.refresh(within=MAX_STALENESS_S)
            except UNREACHABLE as error:
                # Never dispatch on a view of the switches that may be out of date.
                raise RetryBatch(f"governance state unavailable: {error}") from error

    async def run(
        self, stop: asyncio.Event, resume: Resume, owned: Callable[[], Collection[int]]
    ) -> None:
        """Keep the view of switches and policies fresh; dispatch held work once released,
        of the partitions this process owns (`owned`: store.claim_released says why)."""
        while not stop.is_set():
            try:
                await self.refresh()
                partitions = sorted(owned())
                if not self.any_held or not partitions:
                    released = []  # nothing is held anywhere, or nothing here to resume
                else:
                    pool = await self._pool()
                    async with pool.acquire() as conn:
                        released = await store.claim_released(
                            conn,
                            HOLD_LEASE_S,
                            RESUME_BATCH,
                            claimer=self.claimer,
                            partitions=partitions,
                        )
                if released:
                    log.info("%d held dispatches released", len(released))
                    await self._resume_leased(resume, released)
            except UNREACHABLE as error:
                log.warning("governance state unavailable: %r", error)
            except Exception:
                # This loop must outlive any one failed resume (Kafka or the projection
                # unavailable): held work stays held and is claimed again after its lease.
                log.exception("resuming held dispatches failed; retrying")
            try:
                await asyncio.wait_for(stop.wait(), KILL_SWITCH_REFRESH_S)
            except TimeoutError:
                pass

    async def _resume_leased(self, resume: Resume, released: list[store.Held]) -> None:
        """Run the resume while renewing its claims: a call that outlasts the lease must not
        let another dispatcher claim its row and call again."""
        calls = asyncio.create_task(resume(released))
        while True:
            done, _ = await asyncio.wait({calls}, timeout=HOLD_RENEW_S)
            if done:
                calls.result()
                return
            try:
                pool = await self._pool()
                async with pool.acquire() as conn:
                    await store.renew_claims(conn, released, HOLD_LEASE_S)
            except UNREACHABLE as error:
                log.warning("renewing held dispatch claims failed: %r", error)

    async def release_claims(self, held: list[store.Held]) -> None:
        """These holds' claims, cleared while still this claimer's, so their partitions'
        owners claim them at once (store.release_claims). One statement, bounded like a
        call lease's release (held_leases.LET_GO_TIMEOUT_S); never raises: a release that
        fails (Postgres away) leaves the claims to lapse, as a crash does."""
        try:
            async with asyncio.timeout(held_leases.LET_GO_TIMEOUT_S):
                pool = await self._pool()
                async with pool.acquire() as conn:
                    await store.release_claims(conn, held)
        except Exception as error:
            log.warning(
                "releasing %d held dispatch claims failed (%r); they lapse", len(held), error
            )
            return
        log.info("%d held dispatch claims released to their partitions' owners", len(held))

    async def forget(self, held: store.Held) -> None:
        pool = await self._pool()
        async with pool.acquire() as conn:
            await store.forget_held(conn, held)

    async def _intent(self, tenant: str, tx_id: str) -> store.Authority:
        """The transaction's submitting agent, the policy version its submission was
        checked under and the task it named: read once per transaction (an intent row never
        changes once written), for the dispatches asking in one turn in one statement."""
        found = self.intents.get((tenant, tx_id))
        if found is None:
            # Shielded: the read is shared, an asker cancelled leaves it to the others.
            found = await asyncio.shield(self._intent_read((tenant, tx_id)))
        return found

    def learn_intents(self, keys: Iterable[tuple[str, str]]) -> None:
        """Starts reading the intents of dispatches about to be committed (the decider's
        Kafka transaction is on the wire meanwhile), so that the first call of a
        transaction finds its intent read rather than asks Postgres after the commit: at
        concurrency 1 that read was a round trip between the commit and the begin. Never
        waited for; a failed read is forgotten and the gate reads again (`_intent`)."""
        for key in keys:
            if key not in self.intents:
                self._intent_read(key)

    def _intent_read(self, key: tuple[str, str]) -> "asyncio.Future[store.Authority]":
        reading = self._reading.get(key)
        if reading is None or reading.done():  # done: failed, its callback not yet run
            reading = asyncio.ensure_future(self._intent_reads.ask(key))
            self._reading[key] = reading
            reading.add_done_callback(functools.partial(self._read_ended, key))
        return reading

    def _read_ended(self, key: tuple[str, str], reading: "asyncio.Future[object]") -> None:
        if self._reading.get(key) is reading:  # not a later read of the key
            del self._reading[key]
        if not reading.cancelled():
            reading.exception()  # its askers, if any, raise it; a prefetch's is dropped

    async def _read_intents(self, wanted: list[tuple[str, str]]) -> list[store.Authority]:
        known = sorted(set(wanted))
        pool = await self._pool()
        async with pool.acquire() as conn:
            agents = await store.agents_of(conn, known)
        if len(self.intents) + len(known) > _INTENTS_CACHED:
            self.intents.clear()
        # Every dispatch has an intent row (written before the submission was produced);
        # without one no agent can be named, and no grant applies.
        for key in known:
            self.intents[key] = agents.get(key, store.Authority(""))
        return [agents.get(key, store.Authority("")) for key in wanted]

    async def _current(self, tenant: str, checked_under: int) -> None:
        """A submission checked under a policy version newer than this view (the policy was
        replaced between two refreshes, and the agent submitted at once): read it now, so
        a policy is in force for every submission accepted after its PUT answered."""
        cached = self.policies.get(tenant)
        if checked_under > (cached.version if cached else 0):
            await self.refresh()

    def _governed(self, tenant: str) -> bool:
        return tenant in self.policies or bool(self.switches.get(tenant))

    async def clear(
        self, envelope: Envelope, dispatch: OperationDispatched, partition: int
    ) -> bool:
        """True: call the provider now. False: the dispatch was held or sent to review."""
        try:
            return await self._clear(envelope, dispatch, partition)
        except UNREACHABLE as error:
            raise RetryBatch(f"governance state unavailable: {error}") from error

    async def _clear(
        self, envelope: Envelope, dispatch: OperationDispatched, partition: int
    ) -> bool:
        await self._fresh()
        tenant = envelope.tenant
        authority = await self._intent(tenant, envelope.tx_id)
        agent_id = await self._agent(envelope, dispatch)
        await self._current(tenant, authority.policy_version)
        # A task is judged even without a document in force: none grants it.
        if not self._governed(tenant) and authority.task_id is None:
            return True
        policy = self.policies.get(tenant) or open_policy(catalog_of(self.settings).names())
        # The field its provider declares the amount in; an operation the catalog no
        # longer holds is read as before catalogs declared one (`amount`).
        info = catalog_of(self.settings).info(dispatch.provider, dispatch.operation)
        amount = amount_of(dispatch.payload, info.amount_field if info else "amount")
        decision = dispatch_verdict(
            policy,
            self.switches.get(tenant, ()),
            agent_id=agent_id,
            provider=dispatch.provider,
            operation=dispatch.operation,
            forward=dispatch.leg is Leg.FORWARD,
            # The class recorded when the step was accepted, not today's catalog's.
            side_effect=recorded_facts(dispatch.facts, dispatch.operation).side_effect,
            task_id=authority.task_id,
            amount=amount,
            now=datetime.now(UTC),
        )
        if decision.verdict is Verdict.HOLD:
            await self._hold(envelope, dispatch, partition, agent_id, decision.switches)
            return False
        if decision.verdict is Verdict.REVIEW:
            await self.review(envelope, dispatch, decision.reason)
            return False
        # Undo legs count too: a compensation is a call to a provider like any other.
        quotas = quotas_for(policy, agent_id, dispatch.operation)
        if quotas:
            if amount is None and counts_amount(quotas):
                log.warning(
                    "%s %s: an amount quota cannot read the payload's amount, held for review",
                    envelope.tx_id,
                    dispatch.action,
                )
                await self.review(envelope, dispatch, "amount_unreadable")
                return False
            pool = await self._pool()
            async with pool.acquire() as conn:
                refused = await store.reserve_quota(
                    conn,
                    tenant=tenant,
                    agent_id=agent_id,
                    operation=dispatch.operation,
                    op_key=dispatch.op_key,
                    amount=amount or 0,
                    quotas=quotas,
                )
            if refused is not None:
                log.warning(
                    "%s %s: quota of agent %s exceeded (%s), held for review",
                    envelope.tx_id,
                    dispatch.action,
                    agent_id,
                    refused.model_dump_json(),
                )
                await self.review(envelope, dispatch, "quota_exceeded")
                return False
        return True

    async def was_begun(self, envelope: Envelope, dispatch: OperationDispatched) -> bool:
        """Whether a call of this attempt was begun before (by anyone): a redelivery."""
        try:
            pool = await self._pool()
            async with pool.acquire() as conn:
                return await calls_begun.was_begun(
                    conn, envelope.tenant, dispatch.op_key, dispatch.leg.value, dispatch.attempt
                )
        except UNREACHABLE as error:
            raise RetryBatch(f"governance state unavailable: {error}") from error

    async def begin(
        self,
        envelope: Envelope,
        dispatch: OperationDispatched,
        holder: str,
        lease_s: float,
        fence: Fence | None,
    ) -> call_plan.Begun:
        """Right before the call: the durable record of the call about to be made, unless an
        engaged switch stops it (`switches`: the plan holds it) or an abort does (`aborted`:
        not to be made at all); and whether it was begun before (`existed`). A row written
        is `holder`'s for `lease_s` (services.dispatcher.call_lease); nothing is written
        once the partition's owner took it after `fence` (`superseded`). The begins asked in
        one turn (the dispatches a transaction committed) are one statement."""
        try:
            agent_id = await self._agent(envelope, dispatch)
            call = calls_begun.Call(
                tenant=envelope.tenant,
                tx_id=envelope.tx_id,
                op_key=dispatch.op_key,
                leg=dispatch.leg.value,
                attempt=dispatch.attempt,
                agent_id=agent_id,
                provider=dispatch.provider,
                operation=dispatch.operation,
                holder=holder,
                lease_s=lease_s,
                fence=fence,
            )
            return await self._begins.ask(call)
        except UNREACHABLE as error:
            raise RetryBatch(f"governance state unavailable: {error}") from error

    async def claim(
        self,
        envelope: Envelope,
        dispatch: OperationDispatched,
        holder: str,
        lease_s: float,
        fence: Fence | None,
    ) -> calls_begun.Claimed:
        """The call's lease for `holder`, unless another process holds it live or the
        partition's owner took it after `fence` (services.dispatcher.call_fence)."""
        try:
            pool = await self._pool()
            async with pool.acquire() as conn:
                return await calls_begun.claim(
                    conn, _row(envelope, dispatch), holder, lease_s, fence
                )
        except UNREACHABLE as error:
            raise RetryBatch(f"governance state unavailable: {error}") from error

    async def write_fence(self, fence: Fence) -> bool:
        """A partition taken: its owner's fence, for the calls of the processes that had it
        before (services.dispatcher.call_fence); False if a newer one is there. Raises
        RetryBatch while Postgres is away."""
        try:
            pool = await self._pool()
            async with pool.acquire() as conn:
                return await calls_begun.write_fence(conn, fence)
        except UNREACHABLE as error:
            raise RetryBatch(f"governance state unavailable: {error}") from error

    async def release_many(self, released: list[held_leases.Release]) -> None:
        """These calls' leases, cleared if still their holder's (services.dispatcher.
        held_leases: at a revocation, and for a call that ended after its partition's)."""
        pool = await self._pool()
        async with pool.acquire() as conn:
            await calls_begun.release_many(conn, released)

    async def _begin_many(self, calls: list[calls_begun.Call]) -> list[call_plan.Begun]:
        pool = await self._begin_pool()
        async with pool.acquire() as conn:
            return await calls_begun.begin_many(conn, calls)

    async def hold(
        self,
        envelope: Envelope,
        dispatch: OperationDispatched,
        partition: int,
        switch_ids: tuple[str, ...],
    ) -> None:
        """Hold a dispatch whose begin the engaged switches `switch_ids` stopped."""
        try:
            agent_id = await self._agent(envelope, dispatch)
            await self._hold(envelope, dispatch, partition, agent_id, switch_ids)
        except UNREACHABLE as error:
            raise RetryBatch(f"governance state unavailable: {error}") from error

    async def _agent(self, envelope: Envelope, dispatch: OperationDispatched) -> str:
        """The agent the call is charged to: the successor once one claimed the transaction
        (the decider names it on the dispatch), else the submitter."""
        return dispatch.agent_id or (await self._intent(envelope.tenant, envelope.tx_id)).agent_id

    async def _hold(
        self,
        envelope: Envelope,
        dispatch: OperationDispatched,
        partition: int,
        agent_id: str,
        switch_ids: tuple[str, ...],
    ) -> None:
        pool = await self._pool()
        async with pool.acquire() as conn:
            await store.hold(
                conn,
                tenant=envelope.tenant,
                tx_id=envelope.tx_id,
                action=dispatch.action,
                op_key=dispatch.op_key,
                attempt=dispatch.attempt,
                agent_id=agent_id,
                provider=dispatch.provider,
                operation=dispatch.operation,
                partition=partition,
                envelope=envelope.model_dump_json(),
                switch_ids=switch_ids,
            )
        self.held += 1
        log.info(
            "%s %s attempt %d held by kill switch %s",
            envelope.tx_id,
            dispatch.action,
            dispatch.attempt,
            ", ".join(switch_ids),
        )

    async def review(
        self,
        envelope: Envelope,
        dispatch: OperationDispatched,
        reason: str,
        evidence: Evidence | None = None,
    ) -> None:
        """Ask a person about this dispatch instead of making it (the leg goes to review)."""
        command = review_request(envelope, dispatch, reason, datetime.now(UTC), evidence)
        await self.producer.send_and_wait(
            self.settings.topics.commands,
            value=command.model_dump_json().encode(),
            key=partition_key(envelope.tenant, envelope.tx_id),
        )


def review_request(
    envelope: Envelope,
    dispatch: OperationDispatched,
    reason: str,
    issued_at: datetime,
    evidence: Evidence | None = None,
) -> RequestReview:
    """The gate's request that a person decide about this dispatch instead of its call: one
    builder, which the simulator's gate sends too. Its id is the
    attempt's and the reason's (gate_review_id), so a re-delivered dispatch asks again under
    the same id, and a person's `retry` (the next attempt) asks anew."""
    return RequestReview(
        message_id=gate_review_id(dispatch.op_key, dispatch.attempt, reason),
        tenant=envelope.tenant,
        tx_id=envelope.tx_id,
        action=dispatch.action,
        leg=dispatch.leg,
        attempt=dispatch.attempt,
        reason=reason,
        issued_at=issued_at,
        evidence=evidence,
    )


def _row(envelope: Envelope, dispatch: OperationDispatched) -> tuple[str, str, str, int]:
    """The `calls_begun` row of a dispatch's call."""
    return (envelope.tenant, dispatch.op_key, dispatch.leg.value, dispatch.attempt)
