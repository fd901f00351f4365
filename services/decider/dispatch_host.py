"""Dispatch from the decider's committed output (issue 24, item 3): the provider calls of the
OperationDispatched events a partition's Kafka transaction committed, run by the call plan's
executor (services.dispatcher.executor) inside the decider process, never awaited by the
decide/commit loop.

- When: right after the transaction that holds the dispatch commits (services.decider.
  runtime, `_send`), never before: a call is made only for a dispatch in the log. Each order
  runs in a task of its own, at most MAX_CONCURRENT_CALLS at once.
- The answer: while this process owns the partition, an observation is queued as an input of
  the partition's next transaction (`Answers`), which decides it and writes it to
  recon.observations in the same transaction, as evidence, with the INLINE header
  (services.inline_answers): the decider skips that record when its consumer reads
  it back (its offset advances). A
  committed transaction holds the decision and the record together; an aborted one holds
  neither (read_committed), and the answer is lost: the take-over rule calls again.
  An answer the owner cannot take inline (the partition was revoked meanwhile; a resumed
  hold of a partition another decider owns) goes to recon.observations as an ordinary
  record, which the owner decides like any observation: nothing is dropped.
- One caller at a time: a revocation does not wait for the partition's calls in flight
  (an eager rebalance revokes every partition, so it would hold every scale-out for the
  longest call); their `calls_begun` rows hold a lease instead (services.dispatcher.
  call_lease), whose holder is this process (`leases`), and the new owner's take-over
  claims a call before it looks it up, waiting while the old owner's is on the wire. The
  revocation releases this process's leases of the partition's calls that ended (`let_go`,
  one statement), a call still on the wire releases its own when its apply answers (a
  statement of its own, on this rare path), and a call that ends while its partition is
  owned releases nothing (services.dispatcher.held_leases).
  An order of a partition this process no longer owns is not started (`submit`), and a
  claim that waits for another holder's call gives up once the partition is revoked
  (`owns`): nothing is sent, the row is left to the new owner, whose take-over claims it
  (or, for a resumed hold, whose gate loop claims the hold, its claim released here).
  A claim that waited, while the partition is still owned, asks the live state again before
  its lookup (`_awaited`, by the rule `_over` judges a resumed hold by): a leg settled, or a
  transaction a person failed, during the wait is not called (call_plan.Awaited). A zombie
  (this process lost the partition and has not noticed: `owns` and the live state are both
  stale) is stopped by the partition's owner's fence instead: each take writes its
  producer's token (`fenced`), and a claim or a begin carrying an older one is refused
  (services.dispatcher.call_fence; docs/decider.md, "A zombie's resend").
- Take-over: a decider that gains a partition (after its restore, also after a failed
  transaction) runs every leg the restored state holds `dispatched` with no answer
  (transactions.unanswered) through the call plan again, except legs held by a kill switch
  (the gate resumes those). A call this process is still making is not made twice at once:
  it is made again once it ends, since the answers it gave so far may have been lost with
  the failed transaction while its later ones move nothing (a lookup-first call whose first
  lookup was unavailable, lost, then found the effect absent and ended: the leg stays
  `dispatched`, never begun, which the reconciler leaves to the caller; found by the
  simulator, seed 114 with reconcilers.pull.maybe_sent). The plan's begin says
  whether the call was begun: if it was, it is looked up first, and a destructive operation
  found absent is not sent again (NOT_RESENT). This is the rule a redelivered dispatch
  always had; only the source of the redelivery is new.
- Holds: the gate's background loop (the view of switches and policies every 0.2 s, and
  claiming and resuming released holds under a lease) runs here. A resumed hold whose leg
  the live state of an owned partition shows answered or superseded is not called; its
  answer follows the rule above (inline if owned, else Kafka). One whose partition was
  revoked before its call is not called either, and its claim is released at once for the
  new owner (`_resume`).
- Failures: an order whose plan fails (Postgres away: RetryBatch; Kafka refusing an
  off-partition answer) is run again after a back-off while this process owns its partition;
  once it does not, the partition's new owner runs it by the take-over rule. A resumed
  hold's is not run again in its task: after the back-off its claim is released, and the
  owner's gate loop claims and resumes it again at its next look.

Provider credentials and the gate's Postgres pool therefore live in the decider process
(SECURITY.md, docs/decider.md).
"""

import asyncio
import contextlib
import functools
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Collection
from contextlib import AsyncExitStack
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

from events.envelope import Envelope
from events.inputs import OperationObserved
from events.keys import partition_key
from events.transaction_events import OperationDispatched
from services import tracing
from services.closing import stopped_with
from services.config import Settings
from services.decider.take_over import not_held, take_over_orders
from services.dispatcher.call_fence import Fence
from services.dispatcher.dispatch_order import DispatchOrder
from services.dispatcher.executor import Executor
from services.dispatcher.gatekeeper import Gatekeeper
from services.dispatcher.held_leases import HeldLeases
from services.governance import store
from services.kafka_clients import RECORD_REFUSED, acked_producer
from services.kafka_start import start_kafka_client
from services.pg_pool import UNREACHABLE
from services.providers.http import ProviderHttp
from services.providers.lookup_strategy import Strategy, strategy_of
from services.providers.registry import Accounts, build_accounts
from transactions.finished import FinishedTransaction
from transactions.state import TransactionState
from transactions.unanswered import waits_on

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)
# How long a decider that stops waits for its calls in flight before it leaves its group.
LEAVE_WAIT_S = 5.0
# How often a released hold looks whether this process's own call of it has ended: a call
# lasts at most the provider's timeout, and the hold's claim is renewed while it waits.
RESUME_WAIT_S = 0.05


@dataclass(frozen=True)
class Answer:
    """An observation of a call this process made, for the partition's next transaction."""

    partition: int
    observation: OperationObserved
    trace: list[tuple[str, bytes]] | None
    # Its provider cannot be asked (lookup strategy `none`): the answer is the only word on
    # the call, so it is never held back for a later transaction (services.decider.
    # group_commit). Staged and lost in a crash, the next owner could only look up, be told
    # nothing, and send the call to a person.
    unaskable: bool = False


class DispatchHost:
    """The decider's executor of committed dispatches (module docstring)."""

    def __init__(
        self,
        settings: Settings,
        owned: Callable[[], Collection[int]],
        answered: Callable[[Answer], None],
        current: Callable[[int, str, str], TransactionState | FinishedTransaction | None],
    ) -> None:
        self.settings = settings
        # Off (RECON_DECIDER_CALLS=off, tests only): no call is made, no Postgres is used; a
        # dispatch waits for a decider with its calls on to take its partition over.
        self.enabled = settings.decider_calls
        # The partitions this process owns now (the decider's; read at each use).
        self.owned = owned
        self.answered = answered
        self.current = current
        # Off-partition answers and the gate's RequestReview commands (not transactional).
        self.producer: AIOKafkaProducer = acked_producer(settings, "decider-calls")
        self.gate = Gatekeeper(settings, self.producer)
        # The holder of every call lease this process takes (services.dispatcher.
        # held_leases): one id, since it never makes two calls of one attempt at once.
        self.leases = HeldLeases(uuid.uuid4().hex, self.owns, self.gate.release_many)
        self.executor: Executor | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        # The calls this process is making (tenant, key, leg, attempt): a take-over leaves
        # them to finish rather than call twice from one process, and makes them again after
        # (`again`, module docstring).
        self.running: set[tuple[str, str, str, int]] = set()
        self.again: dict[tuple[str, str, str, int], DispatchOrder] = {}
        # Calls in flight per partition: their answers will open its next transaction.
        self.calling: Counter[int] = Counter()
        self.stop = asyncio.Event()
        # Set while the process stops: every answer goes to recon.observations.
        self.leaving = False
        self._gate_loop: asyncio.Task[None] | None = None

    async def start(self, stack: AsyncExitStack, stop: asyncio.Event) -> bool:
        """False: stopped while the broker was away."""
        if not self.enabled:
            return True
        # On the stack before its start: one that fails is stopped too (services.closing).
        stopped_with(stack, self.producer)
        if not await start_kafka_client(self.producer, "decider dispatch producer", stop):
            return False
        http = await stack.enter_async_context(
            ProviderHttp(self.settings.provider_timeout_s, connect_s=2.0)
        )
        accounts: Accounts = build_accounts(http, self.settings)
        self.executor = Executor(accounts, self.gate, self, self.leases)
        stack.push_async_callback(self.gate.close)
        stack.push_async_callback(self.close)
        self._gate_loop = asyncio.create_task(self.gate.run(self.stop, self._resume, self.owned))
        return True

    def owns(self, partition: int) -> bool:
        """Whether this process still makes the calls of `partition`: the one rule that
        `submit`, a waiting claim (the executor's `mine`), a failed call's retry and a
        resume ask. A resumed hold follows it too: once its partition is revoked, its call
        is the new owner's, whose loop claims the hold."""
        return partition in self.owned()

    async def close(self) -> None:
        """Calls in flight are cancelled: the partition's next owner runs each again, looked
        up first if it was begun."""
        self.stop.set()
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks))
        if self._gate_loop is not None:
            await self._gate_loop
        # The calls that ended since `leave` (the cancelled ones' leases lapse).
        await self.leases.let_go()

    def fenced(self, partition: int, fence: Fence) -> None:
        """This process took `partition` (its transactional producer initialised, fencing
        the earlier ones): its claims and begins carry `fence` from now on, and it is written
        for the claims of the processes that had the partition before (services.
        dispatcher.call_fence), in a task, retried while Postgres is away, so a take never
        waits on Postgres. Until it is written a zombie's call is not refused: the
        partition's first statements after the take (docs/decider.md, "A zombie's
        resend")."""
        if not self.enabled:
            return
        self.leases.fenced(partition, fence)

        async def write() -> None:
            delay = 0.5
            while not self.stop.is_set():
                try:
                    if not await self.gate.write_fence(fence):
                        if self.leases.fence(partition) != fence:
                            # This process took the partition again meanwhile, and that
                            # take's fence landed first: nothing to tell anyone.
                            return
                        # A later take's (this process is a zombie already), or one of a
                        # Kafka cluster that reached this database after this process's:
                        # then its calls of the partition are refused (a cluster the
                        # database left, or one rewound: docs/operations.md).
                        log.warning(
                            "partition %d: a newer call fence than this take's (%r) is"
                            " recorded: a later take's, or a Kafka cluster's that reached"
                            " this database after this one (if this cluster is meant to be"
                            " the live one again, see 'Replacing the brokers' in"
                            " docs/operations.md)",
                            partition,
                            fence,
                        )
                    return
                except Exception as error:
                    log.warning(
                        "partition %d: writing its call fence failed (%r)", partition, error
                    )
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stop.wait(), delay)
                    delay = min(delay * 2, 5.0)

        task = asyncio.create_task(write())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def let_go(self, partitions: set[int]) -> None:
        """At a revocation, once the partitions are dropped: the leases of their calls that
        are not on the wire are released in one statement, so the next owners' take-overs
        claim them at once (services.dispatcher.held_leases)."""
        if self.enabled:
            released = await self.leases.let_go(partitions)
            if released:
                log.info("partitions %s: %d call leases released", sorted(partitions), released)

    async def leave(self, pending: list[Answer]) -> None:
        """Before the decider lets its partitions go (a clean stop): no new call starts, the
        answers not decided yet and those of the calls still in flight go to
        recon.observations as ordinary records, for the partitions' next owners, and the calls
        get LEAVE_WAIT_S to end, so that a next owner's take-over does not look up a call that
        is still on its way (and, for a write found absent, send it again)."""
        self.leaving = True
        self.stop.set()
        if not self.enabled:
            return
        calls = [t for t in self.tasks if not t.done()]
        if calls:
            log.info("waiting for %d calls in flight before leaving", len(calls))
        # Forwarded in the same time as the calls get: a broker that answers nothing holds
        # each send 40 s and more. An answer not forwarded is not lost: its call's
        # partition's next owner looks the call up at its take-over (first if begun).
        forwarding = asyncio.ensure_future(self._forward_all(pending))
        await asyncio.wait([forwarding, *calls], timeout=LEAVE_WAIT_S)
        if not forwarding.done():
            forwarding.cancel()
            log.warning(
                "answers of %d calls not forwarded within %.0f s of the stop (Kafka does not"
                " answer); the partitions' next owners look those calls up",
                len(pending),
                LEAVE_WAIT_S,
            )
            await asyncio.wait({forwarding}, timeout=1.0)
        # Before the group is left: the next owners find these calls' leases released.
        await self.leases.let_go()

    async def _forward_all(self, answers: list[Answer]) -> None:
        for answer in answers:
            with contextlib.suppress(Exception):
                await self.forward(answer)

    def prepare(self, orders: list[DispatchOrder]) -> None:
        """Before the commit of these dispatches: the gate starts reading what their calls
        will ask first (Gatekeeper.learn_intents), while the transaction is on the wire."""
        if self.enabled and orders:
            self.gate.learn_intents((o.envelope.tenant, o.envelope.tx_id) for o in orders)

    def submit(self, orders: list[DispatchOrder]) -> None:
        """Starts the calls of committed dispatches of partitions this process owns; never
        waits for them. An order of a partition it no longer owns (revoked while a take-over
        read its holds) is its new owner's, by the take-over rule."""
        if not self.enabled:
            return
        for order in orders:
            if order.leg_key in self.running:
                continue
            if not self.owns(order.partition):
                log.info(
                    "%s %s: partition %d not owned, not called", *_named(order), order.partition
                )
                continue
            self.running.add(order.leg_key)
            self.calling[order.partition] += 1
            task = asyncio.create_task(self._carry(order))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            task.add_done_callback(functools.partial(self._called, order.partition))

    def _called(self, partition: int, _: "asyncio.Task[None]") -> None:
        self.calling[partition] -= 1

    async def _carry(self, order: DispatchOrder, held: store.Held | None = None) -> None:
        assert self.executor is not None
        attempt = 0
        try:
            while not self.stop.is_set():
                try:
                    mine = functools.partial(self.owns, order.partition)
                    awaited = functools.partial(self._awaited, order)
                    made = await self.executor.run(order, mine, awaited)
                    if held is not None:
                        await self._settle(order, held, made)
                    return
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    if not self.owns(order.partition):
                        # Its owner now runs it: by the take-over rule, or a hold by its
                        # resume, once this claim is released.
                        log.info("%s %s: partition revoked (%r)", *_named(order), error)
                        if held is not None:
                            await self.gate.release_claims([held])
                        return
                    delay = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
                    attempt += 1
                    log.warning("%s %s failed (%r); again in %.1f s", *_named(order), error, delay)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stop.wait(), delay)
                    if held is not None:
                        # Released, not retried here: the owner's gate loop claims it again
                        # at its next look, and resumes it judged by the live state then
                        # (`_resume_one`), one resumer at a time. Left to lapse, as until
                        # stop 48, it waited HOLD_LEASE_S (60 s). Crash before the release,
                        # or Postgres away: the claim lapses, as before.
                        await self.gate.release_claims([held])
                        return
        finally:
            self.running.discard(order.leg_key)
            again = self.again.pop(order.leg_key, None)
            if again is not None and not self.stop.is_set() and self.owns(again.partition):
                self.submit([again])

    async def _settle(self, order: DispatchOrder, held: store.Held, made: bool) -> None:
        """A resumed hold's plan ended: forgotten once it ran to its end in a process that
        still owns the partition. Released otherwise, so the owner resumes it, judged by the
        transaction's live state, which only it knows: when its claim gave up (the partition
        was revoked while another holder's lease kept the call waiting), waited out here,
        the call would be made on this process's judgement of the state before the
        revocation, after a person may have failed the transaction (the reconciler looks up
        a begun held leg and sends it to review meanwhile); when the partition was revoked
        during the call, the new owner's take-over left the held leg to this resume (take_
        over.not_held), and this resume's answers, gone to recon.observations, may not
        settle it (an unknown answer, then a lookup's `absent`, of a lookup-first attempt
        never begun): forgotten, nobody would call it again (found by the simulator, seed
        20156, stuck). Crash before the statement: the claim lapses, as before."""
        if made and self.owns(order.partition):
            await self.gate.forget(held)
        else:
            await self.gate.release_claims([held])

    async def observed(self, order: DispatchOrder, observation: OperationObserved) -> None:
        """The executor's report sink: inline while this process owns the partition, else an
        ordinary record the owner decides."""
        trace = tracing.kafka_headers()
        if self.owns(order.partition) and not self.leaving:
            self.answered(Answer(order.partition, observation, trace, self._unaskable(order)))
            return
        await self.forward(Answer(order.partition, observation, trace))

    def _unaskable(self, order: DispatchOrder) -> bool:
        assert self.executor is not None
        adapter = self.executor.accounts.adapter_for(order.envelope.tenant, order.dispatch.provider)
        return adapter is not None and strategy_of(adapter) is Strategy.NONE

    async def forward(self, answer: Answer) -> None:
        """An answer for a partition another decider owns: an ordinary observation."""
        obs = answer.observation
        await self.producer.send_and_wait(
            self.settings.topics.observations,
            value=obs.model_dump_json().encode(),
            key=partition_key(obs.tenant, obs.tx_id),
            partition=answer.partition,
            headers=answer.trace,
        )

    def forward_later(self, answers: list[Answer]) -> None:
        """From the decide loop, which must not wait on Kafka: forwarded in a task, retried
        until acknowledged or the process stops (a stop loses nothing the take-over rule
        does not call again). A record Kafka refuses for its size is never sent again, nor
        does it hold back the answers after it: its leg stays dispatched until the pull
        reconciler finds it stuck and looks it up (or a take-over calls it again)."""

        async def send() -> None:
            for answer in answers:
                delay = 0
                while True:
                    try:
                        await self.forward(answer)
                        break
                    except RECORD_REFUSED as error:
                        obs = answer.observation
                        log.error(
                            "%s %s: Kafka refused its answer (%r); not forwarded",
                            obs.tx_id,
                            obs.action,
                            error,
                        )
                        break
                    except Exception as error:
                        if self.stop.is_set():
                            break  # its partition's owner calls again (take-over)
                        log.warning("forwarding an answer failed (%r); retrying", error)
                        delay = min(delay + 1, 5)
                        await asyncio.sleep(delay)

        task = asyncio.create_task(send())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def take_over(self, partition: int, states: dict[tuple[str, str], TransactionState]) -> None:
        """After the partition's restore: its unanswered dispatches, run again (module
        docstring). Held legs are the gate's to resume."""
        if not self.enabled:
            return
        waiting = take_over_orders(states.values(), partition)
        if not waiting:
            return

        async def run() -> None:
            held = await self._held(partition)
            # A call still running here, a resumed hold's too, is made again once it ends:
            # its answer may have gone with the failed transaction, and a resume forgets its
            # hold when it ends, so nobody else would (found by the simulator, seed 810: a
            # resumed attempt's balance read was reported unknown, lost, and the leg, never
            # begun, waited for a caller for good).
            self.again.update((o.leg_key, o) for o in waiting if o.leg_key in self.running)
            orders = [o for o in not_held(waiting, held) if o.leg_key not in self.running]
            if orders:
                log.info("partition %d: %d unanswered dispatches run again", partition, len(orders))
                self.submit(orders)

        task = asyncio.create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _held(self, partition: int) -> set[tuple[str, str, int]]:
        delay = 0.5
        while not self.stop.is_set():
            try:
                pool = await self.gate._pool()
                async with pool.acquire() as conn:
                    return await store.held_on(conn, partition)
            except UNREACHABLE as error:
                log.warning("reading held dispatches failed (%r); retrying", error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        return set()

    async def _resume(self, released: list[store.Held]) -> None:
        """Held dispatches whose switches were released, through the gate again. A row
        claimed again (a resumer died after its call and before forgetting the hold) is a
        redelivery exactly when its call was begun: the call plan asks the durable record."""
        runs = []
        for held in released:
            env = Envelope.model_validate_json(held.envelope)
            dispatch = env.event()
            assert isinstance(dispatch, OperationDispatched)
            runs.append(self._resume_one(DispatchOrder(env, dispatch, held.partition), held))
        left = await asyncio.gather(*runs)
        # Revoked between their claim and their call: released now, so the partitions' new
        # owners claim them at their next look (0.2 s) rather than after the lease (60 s).
        # A crash before this statement, or a failed one, leaves the claims to lapse.
        mine_no_more = [held for held, gone in zip(released, left, strict=True) if gone]
        if mine_no_more:
            await self.gate.release_claims(mine_no_more)

    async def _resume_one(self, order: DispatchOrder, held: store.Held) -> bool:
        """One released hold, never beside a call of the same attempt that this process is
        making (`running`): the lease's holder is the process, so the resumed call's claim
        would not wait for it and both would be on the wire at once. That happens when a
        take-over called a leg before another process's call of it (a zombie's) was held,
        or when a hold is written again (its claim cleared) while this process resumes it;
        found by the simulator (seed 438). So it waits for that call to end (its claim
        renewed meanwhile), then judges it: answered by then, or held again, or called.
        True: not this process's to resume any more (its partition revoked since the claim,
        or the process stops), so `_resume` releases its claim."""
        while order.leg_key in self.running and self._resumable(order):
            await asyncio.sleep(RESUME_WAIT_S)
        if not self._resumable(order):
            # The hold is the partition's owner's: only the owner knows whether the
            # transaction still waits on it (store.claim_released). Whatever this process's
            # own call of the attempt still does, the lease keeps the owner's from it.
            log.info("%s %s held: not resumed here, left to its partition's owner", *_named(order))
            return True
        if self._over(order):
            log.info("%s %s held, then not dispatched: answered meanwhile", *_named(order))
            await self.gate.forget(held)
            return False
        # Nothing awaited since the check: no other call of it started meanwhile.
        self.running.add(order.leg_key)
        await self._carry(order, held)
        return False

    def _resumable(self, order: DispatchOrder) -> bool:
        return not self.stop.is_set() and self.owns(order.partition)

    def _over(self, order: DispatchOrder) -> bool:
        """Whether the live state of the order's partition, which this process owns, shows
        this attempt answered or superseded, or its transaction finished (a person may fail
        a transaction whose held leg a crashed resumer had begun: the reconciler looked it
        up and found nothing; found by the simulator, seed 851). A state not known here (a
        partition not owned: `current` has none) is not over: asked by a call, whose claim
        gives up once its partition is revoked, that is a judgement a statement old."""
        return not self._awaited(order)

    def _awaited(self, order: DispatchOrder) -> bool:
        """The executor's `awaited`, asked after a claim that waited for another holder's
        call: the transaction may have moved on during the wait (call_plan.Awaited)."""
        state = self.current(order.partition, order.envelope.tenant, order.envelope.tx_id)
        return waits_on(state, order.dispatch)


def _named(order: DispatchOrder) -> tuple[str, str]:
    return order.envelope.tx_id, f"{order.dispatch.action} attempt {order.dispatch.attempt}"
