"""The executor of the call plan, for whichever process hosts dispatch: one dispatch order in,
its answers out through an injected `ReportSink`.

An order is a committed OperationDispatched with the envelope it travelled in and the
partition of its transaction. `Executor.run` runs the pure plan of services.dispatcher.
call_plan against the real I/O: the gate and `calls_begun` in Postgres
(services.dispatcher.gatekeeper), the provider adapters, and the sink, which receives each
observation the plan reports. Where an observation goes (the observations topic, or the
hosting process's own next input) is the host's choice, not the executor's: the plan and its
redelivery rule (a call begun before is looked up first; a destructive one found absent is
never sent again) are the same whoever hosts it. A review the gate or the plan asks for is a
RequestReview command the gate produces to recon.commands.

Bounded: at most MAX_CONCURRENT_CALLS orders run their plans at once, so a slow provider
holds a bounded number of calls and never the host's own loop.

One caller at a time (services.dispatcher.call_lease): the holder of a call's lease is the
process (`HeldLeases.holder`, one id per DispatchHost), which never makes two calls of one
attempt at once. A begin takes the row's lease, a Claim waits for another process's to end
or lapse (this process's own is taken at once), and the apply is sent only within the lease
this call took and cut when it ends. A call that ends releases nothing: the process's
leases are released when it loses their partitions (services.dispatcher.held_leases), so
the normal path costs no statement beyond the begin. A claim that waits gives up once the
host says the call is no longer its to make (`mine`: its partition was revoked), rather
than wait out another holder's lease for a call the partition's new owner claims anyway:
then nothing was taken or sent, and the row is left as it was, to the new owner. A claim
that waited asks the host whether the transaction still waits on the call (`awaited`, the
plan's Awaited) before it looks up, and a redelivery asks again before it sends what its
lookup found absent: not, the plan ends, nothing sent, and its lease is kept like any ended
call's. A claim carries this process's fence of the partition (services.
dispatcher.call_fence): refused once the partition's owner took it after this process (a
zombie's redelivery on its stale state), it ends as a claim given up does.
"""

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol, assert_never

from opentelemetry.trace import SpanKind

from events.inputs import Evidence, OperationObserved, Source
from events.keys import dispatch_observation_id
from events.observation import Seen
from services import tracing
from services.crash_points import (
    DISPATCHER_AFTER_PROVIDER_ANSWERED,
    DISPATCHER_ANSWER_NOT_REPORTED,
    DISPATCHER_BEFORE_CALL_BEGUN,
    pause_point,
    task_pause_point,
)
from services.dispatcher.call_lease import (
    BEGIN_REQUESTS,
    CLAIM_POLL_S,
    CLAIM_REQUESTS,
    held_s,
    lease_s,
)
from services.dispatcher.call_plan import (
    Apply,
    Awaited,
    Balance,
    Begin,
    Claim,
    Gate,
    Hold,
    Lookup,
    Report,
    Request,
    Review,
    Sleep,
    Turn,
    WasBegun,
    call_plan,
    dispatch_observation,
)
from services.dispatcher.calls_begun import Claimed
from services.dispatcher.dispatch_order import DispatchOrder
from services.dispatcher.gatekeeper import Gatekeeper
from services.dispatcher.held_leases import HeldLeases
from services.providers.classify import unreachable
from services.providers.interface import ProviderAdapter, Sent
from services.providers.registry import Accounts

log = logging.getLogger(__name__)

MAX_CONCURRENT_CALLS = 64


class ReportSink(Protocol):
    async def observed(self, order: DispatchOrder, observation: OperationObserved) -> None:
        """Take one observation of `order`'s call; return once it will not be lost by the
        host (acknowledged by Kafka, or queued as the owner's next input)."""


class Executor:
    def __init__(
        self, accounts: Accounts, gate: Gatekeeper, sink: ReportSink, leases: HeldLeases
    ) -> None:
        self.accounts = accounts
        self.gate = gate
        self.sink = sink
        self.leases = leases
        self.calls = asyncio.Semaphore(MAX_CONCURRENT_CALLS)

    async def run(
        self,
        order: DispatchOrder,
        mine: Callable[[], bool],
        awaited: Callable[[], bool],
        *,
        span_of: dict[str, str | int] | None = None,
    ) -> bool:
        """Runs the order's plan once a call slot is free. `mine`: whether the call is still
        this process's to make (asked while a claim waits; the host's ownership of the
        order's partition). `awaited`: whether the transaction still waits on the call
        (asked after a claim that waited; the host's live state). False: a claim was given
        up for it (nothing sent, nothing reported); True: the plan ran to its end (a call
        found no longer awaited too: nothing more is owed to it). Raises what the plan's I/O raised
        (services.at_least_once.RetryBatch when Postgres is away): the host retries the
        order, and the plan's begin statement makes the retry a redelivery if a call was
        begun."""
        async with self.calls:
            # The call's span continues the trace of the decision that dispatched it; its
            # context goes to the provider (HTTP headers) and back in the observations.
            with tracing.span(
                "dispatcher.call",
                tracing.context_from(order.trace),
                SpanKind.CLIENT,
                semantic=span_of,
                tx_id=order.envelope.tx_id,
                op_key=order.dispatch.op_key,
                attempt=order.dispatch.attempt,
                action=order.dispatch.action,
            ):
                return await Call(self, order, mine, awaited).run()


class Call:
    """One dispatch: the plan of services.dispatcher.call_plan, executed with the real I/O
    (the gate and `calls_begun` in Postgres, the provider, the sink)."""

    def __init__(
        self,
        executor: Executor,
        order: DispatchOrder,
        mine: Callable[[], bool],
        awaited: Callable[[], bool],
    ) -> None:
        self.x = executor
        self.order = order
        self.mine = mine
        self.awaited = awaited
        self.envelope = order.envelope
        self.dispatch = order.dispatch
        self.holder = executor.leases.holder
        self.row = (
            order.envelope.tenant,
            order.dispatch.op_key,
            order.dispatch.leg.value,
            order.dispatch.attempt,
        )
        # While this call holds its row's lease: the loop time past which it sends nothing.
        self.held_until: float | None = None
        # Set when a claim was given up (`mine` said no): the plan ends, nothing sent.
        self.given_up = False

    async def run(self) -> bool:
        """False: given up at a claim (Executor.run)."""
        # The envelope's tenant, the log's: the call goes to that tenant's account.
        adapter = self.x.accounts.adapter_for(self.envelope.tenant, self.dispatch.provider)
        plan = call_plan(self.dispatch, adapter_known=adapter is not None)
        answer: object = None
        try:
            while True:
                try:
                    request = plan.send(answer)
                except StopIteration:
                    return not self.given_up
                answer = await self.execute(request, adapter)
        except asyncio.CancelledError:
            self.x.leases.cancelled(self.row)
            raise
        finally:
            # A claim whose lookup settled the call, or a plan cut short by an error: its
            # lease is kept (a retry here claims it at once) unless the partition is gone.
            await self.x.leases.ended(self.row)

    async def execute(self, request: Request[Any], adapter: ProviderAdapter | None) -> object:
        env, dispatch, gate = self.envelope, self.dispatch, self.x.gate
        match request:
            case Gate():
                return await gate.clear(env, dispatch, self.order.partition)
            case WasBegun():
                return await gate.was_begun(env, dispatch)
            case Report():
                await self.report(request)
                return None
            case Sleep(seconds=seconds):
                await asyncio.sleep(seconds)
                return None
            case Begin():
                await pause_point(DISPATCHER_BEFORE_CALL_BEGUN)
                # Measured before the statement: this holder's bound ends first.
                began = asyncio.get_running_loop().time()
                timeout = gate.settings.provider_timeout_s
                begun = await gate.begin(
                    env,
                    dispatch,
                    self.holder,
                    lease_s(timeout, BEGIN_REQUESTS),
                    self.x.leases.fence(self.order.partition),
                )
                if begun.written:
                    self.held_until = began + held_s(timeout, BEGIN_REQUESTS)
                    self.x.leases.took(
                        self.row, self.order.partition, began, lease_s(timeout, BEGIN_REQUESTS)
                    )
                if begun.superseded:
                    # As a refused claim: the partition's owner took it after this process.
                    log.info(
                        "%s %s attempt %d: the partition's owner took it after this process;"
                        " not begun",
                        env.tx_id,
                        dispatch.action,
                        dispatch.attempt,
                    )
                    self.given_up = True
                if begun.aborted:
                    log.info("%s %s: aborted before its call was begun", env.tx_id, dispatch.action)
                return begun
            case Claim():
                return await self.claim()
            case Awaited():
                if self.awaited():
                    return True
                log.info(
                    "%s %s attempt %d: no longer awaited by its transaction; not called",
                    env.tx_id,
                    dispatch.action,
                    dispatch.attempt,
                )
                return False
            case Hold(switches=switches):
                await gate.hold(env, dispatch, self.order.partition, switches)
                return None
            case Review():
                await self.review(request)
                return None
        # The rest speak to the provider, which the plan asks for only when it is known.
        assert adapter is not None
        match request:
            case Lookup():
                # The first attempt's dispatch is older than the first send under the key:
                # a replaying adapter judges the key's retention from it (services.
                # providers.interface.Sent). The key is the leg's, every attempt's: a later
                # attempt's dispatch is younger than the first send, so it carries none, and
                # a replaying adapter finds the effect without resending.
                at = datetime.fromisoformat(env.occurred_at)
                sent = Sent(dispatch.payload, at) if dispatch.attempt == 1 else None
                return await adapter.lookup(dispatch.operation, dispatch.op_key, sent)
            case Balance(charge=charge):
                return await adapter.balance(charge)
            case Apply():
                seen = await self.apply(adapter)
                self.held_until = None
                # Off the wire: a statement only if the partition was revoked meanwhile, so
                # the new owner's claim goes on before this answer is even reported.
                await self.x.leases.ended(self.row)
                await pause_point(DISPATCHER_AFTER_PROVIDER_ANSWERED)
                await task_pause_point(DISPATCHER_ANSWER_NOT_REPORTED)
                return seen
        raise AssertionError(f"no executor for {request!r}")

    async def claim(self) -> Turn:
        """Until no other holder's lease on this call is live; then it is this one's (at
        once, or after a wait). GIVEN_UP: the call stopped being this process's while
        another held it (`mine`), or the partition's owner took it after this process
        (its fence, services.dispatcher.call_fence)."""
        env, dispatch, gate = self.envelope, self.dispatch, self.x.gate
        timeout = gate.settings.provider_timeout_s
        waited = False
        while True:
            at = asyncio.get_running_loop().time()
            fence = self.x.leases.fence(self.order.partition)
            claimed = await gate.claim(
                env, dispatch, self.holder, lease_s(timeout, CLAIM_REQUESTS), fence
            )
            match claimed:
                case Claimed.TAKEN:
                    self.held_until = at + held_s(timeout, CLAIM_REQUESTS)
                    self.x.leases.took(
                        self.row, self.order.partition, at, lease_s(timeout, CLAIM_REQUESTS)
                    )
                    if waited:
                        log.info("%s %s: the other call ended", env.tx_id, dispatch.action)
                        return Turn.WAITED
                    return Turn.AT_ONCE
                case Claimed.NO_ROW:
                    # A row purged meanwhile (retention): nobody holds the call.
                    return Turn.WAITED if waited else Turn.AT_ONCE
                case Claimed.SUPERSEDED:
                    # The partition's owner took it after this process (a zombie that has
                    # not noticed yet: `mine` still says yes), so the state this call was
                    # judged on is stale: a lookup that found nothing would send it again
                    # after the owner may have failed its transaction (services.dispatcher.
                    # call_fence). Nothing taken, nothing sent: the call is the owner's.
                    log.info(
                        "%s %s attempt %d: the partition's owner took it after this process;"
                        " not called",
                        env.tx_id,
                        dispatch.action,
                        dispatch.attempt,
                    )
                    self.given_up = True
                    return Turn.GIVEN_UP
                case Claimed.HELD:
                    # Asked before each wait, so a revocation this process has heard of ends
                    # it within one poll: the new owner's take-over claims the call, and this
                    # process has sent nothing and taken nothing, so the row is left as the
                    # other holder has it. A claim that takes the call just after a
                    # revocation (before this process heard of it) keeps two calls of the
                    # attempt from the wire at once all the same (the new owner's claim
                    # waits for this one), but not a call on a stale state: a zombie's
                    # claim (or begin) after the new owner took the partition is refused
                    # by the owner's fence (SUPERSEDED above), and a begin before it landed
                    # is the window docs/decider.md ("A zombie's resend") leaves open.
                    if not self.mine():
                        log.info(
                            "%s %s attempt %d: no longer this process's to make; not called",
                            env.tx_id,
                            dispatch.action,
                            dispatch.attempt,
                        )
                        self.given_up = True
                        return Turn.GIVEN_UP
                    if not waited:
                        log.info(
                            "%s %s attempt %d: another caller is making this call;"
                            " waiting for it to end",
                            env.tx_id,
                            dispatch.action,
                            dispatch.attempt,
                        )
                        waited = True
                    await asyncio.sleep(CLAIM_POLL_S)
                case _:
                    assert_never(claimed)

    async def apply(self, adapter: ProviderAdapter) -> Seen:
        """The provider call, within this holder's lease: not sent once it ended, cut when
        it ends (an unknown answer, which lookups settle)."""
        dispatch = self.dispatch
        call = adapter.apply(dispatch.operation, dispatch.op_key, dispatch.payload)
        if self.held_until is None:
            return await call  # a row purged meanwhile: nobody else holds the call
        left = self.held_until - asyncio.get_running_loop().time()
        if left <= 0:
            call.close()
            return unreachable(TimeoutError("the call's lease ended before it was sent"))
        try:
            async with asyncio.timeout(left):
                return await call
        except TimeoutError:
            return unreachable(TimeoutError("no answer within the call's lease"))

    async def review(self, request: Review) -> None:
        """No call is made: a person decides, with the provider's answer as evidence."""
        seen, dispatch = request.seen, self.dispatch
        log.warning("%s: %s", self.envelope.tx_id, seen.error)
        evidence = Evidence(
            observation_id=dispatch_observation_id(
                dispatch.op_key,
                dispatch.attempt,
                Source.RESPONSE.value,
                seen.outcome.value,
                request.lookups,
            ),
            source=Source.RESPONSE,
            outcome=seen.outcome,
            attempt=dispatch.attempt,
            status_code=seen.status_code,
            body=seen.body,
            error=seen.error,
            observed_at=datetime.now(UTC).isoformat(),
        )
        await self.x.gate.review(self.envelope, dispatch, request.reason, evidence)

    async def report(self, request: Report) -> None:
        env, dispatch, seen = self.envelope, self.dispatch, request.seen
        observation = dispatch_observation(env, dispatch, request, datetime.now(UTC))
        await self.x.sink.observed(self.order, observation)
        if seen.alarm is not None:
            # Unknown, so the transaction waits; a person must fix the configuration.
            log.error(
                "%s %s attempt %d: %s", env.tx_id, dispatch.action, dispatch.attempt, seen.alarm
            )
        log.info(
            "%s %s attempt %d: %s via %s",
            env.tx_id,
            dispatch.action,
            dispatch.attempt,
            seen.outcome.value,
            request.source.value,
        )
