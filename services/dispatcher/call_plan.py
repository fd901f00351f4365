"""The dispatcher's decision for one call, without its I/O: the gate, the redelivery rule,
the lookup first, the preconditions, the last gate before the call, the call, the lookups
that resolve an unknown answer, and what is reported.

`call_plan` is a generator that yields requests (ask the gate, ask whether the call was
begun, look up, read a balance, begin, hold, apply, sleep, report, ask for a review) and
receives each request's answer through `send()`. services.dispatcher.executor.Call
executes it against Postgres, Kafka and the provider; the deterministic simulator (under
tests/) interprets the same plan against its modelled provider, clock and `calls_begun`
table, so it tests the rules that run in production, not a copy of them.

The rules, in the order they are asked:
- The policy gate (services.dispatcher.gatekeeper): a dispatch it holds or sends to review
  is not called.
- A dispatch is a redelivery exactly when its call was begun (services.dispatcher.
  calls_begun), never because its offset is old. A redelivery, and an attempt the decider
  marked `lookup_first`, looks up before it applies; an effect found is reported and no
  call is made. A redelivered destructive call found absent is not sent again
  (events.retry_policy.redelivery_may_apply): the first call may still land.
  When nothing has to be asked between that question and the begin (no `lookup_first`, no
  precondition to re-check: every first send), the begin statement answers it (`Begun.
  existed`) in the same round trip: a row written is a first send, called at once; a row
  found is a redelivery, looked up, and begun again (the last gate) before any call.
- A new attempt (after the first) re-checks its preconditions (services.providers.
  preconditions): one that no longer holds asks a person, one that cannot be read is
  reported `unknown`.
- Begin, the last gate: an engaged kill switch holds the call (Hold), a recorded abort
  stops a step's call that was never begun (events.aborted_before_call), and a destructive
  call another dispatcher began meanwhile is not sent twice.
- One caller at a time (services.dispatcher.call_lease): a begin holds its call under a
  lease, and a redelivery (or a call another dispatcher began meanwhile) claims it before
  it looks up, waiting while another process holds it live, so its lookup sees what that
  call did and two calls of one attempt are never on the wire at once. A claim the
  executor gives up (the call is no longer this process's to make: its partition went to
  another, whose take-over claims it; or the partition's owner took it after this process,
  whose claim its fence refuses, services.dispatcher.call_fence) ends the plan: nothing
  sent, nothing reported.
  A claim that waited asks the transaction again before it looks up (Awaited): the wait
  lasts as long as the other holder's call (a zombie's lease: 12-32 s at a 5 s provider
  timeout), and meanwhile another answer may settle the leg, or a person fail the
  transaction (the reconciler looks a begun leg up and sends it to review), after which a
  lookup that finds nothing would send a non-destructive leg again. No longer awaited, the
  plan ends: nothing looked up, sent or reported. A redelivery whose lookup found nothing
  asks again before it sends, waited or not (`_still_awaited`): the call's own answer, a
  decline that leaves nothing to find, may have failed the transaction meanwhile.
- An `unknown` answer is resolved by lookups with backoff (LOOKUP_BACKOFF_S); past them
  the scheduled reconciler takes over.

Pure: no I/O, no clock.
"""

from collections.abc import Generator
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Generic, TypeVar, assert_never, cast

from events.aborted_before_call import ABORTED_BEFORE_CALL
from events.catalog import Classified
from events.envelope import Envelope
from events.inputs import OperationObserved, Outcome, Source
from events.keys import dispatch_observation_id
from events.legacy_facts import recorded_facts
from events.observation import Seen, observation
from events.retry_policy import redelivery_may_apply
from events.transaction_events import OperationDispatched
from services.providers.preconditions import PRECONDITION_FAILED, balance_needed, judge_balance

# Lookups after an unknown answer: quick at first (lost responses are usually
# visible at once), then backing off. Past this the operation stays `unknown` for
# the scheduled reconciler.
LOOKUP_BACKOFF_S = (0.1, 0.3, 0.6, 1.2, 2.4)
NOT_RESENT = (
    "destructive operation redelivered and absent at the provider: a previous dispatcher "
    "may have sent it, so it is not sent again; lookups or a person settle it"
)

Answer = TypeVar("Answer")


@dataclass(frozen=True)
class Begun:
    """What the `begin` statement answered (services.dispatcher.calls_begun)."""

    # The engaged switches that cover the call; when not empty nothing was written.
    switches: tuple[str, ...]
    # Whether this statement wrote the row (False: it existed, the call was begun before).
    written: bool
    # The transaction's abort was recorded and no call of this step was ever begun: nothing
    # was written, and the call must not be made (events.aborted_before_call).
    aborted: bool = False
    # The row of this very call (its attempt) existed when the statement began, whatever
    # the switches: a call may have been made, so the dispatch is a redelivery. (False with
    # `written` False and nothing blocking: another dispatcher wrote it meanwhile.)
    existed: bool = False
    # The partition's owner took it after the caller's process (its fence is newer:
    # services.dispatcher.call_fence): nothing was written, and the call is not this
    # process's to make, on a state that went stale when it lost the partition.
    superseded: bool = False


class Request(Generic[Answer]):
    """Something the plan needs done; `Answer` is what the executor sends back."""


@dataclass(frozen=True)
class Gate(Request[bool]):
    """Grants, quotas, kill switches: True to go on; False, the gate held the dispatch or
    sent it to review, and nothing more is done."""


@dataclass(frozen=True)
class WasBegun(Request[bool]):
    """Whether a call of this attempt was begun before, by anyone."""


@dataclass(frozen=True)
class Lookup(Request[Seen]):
    """Ask the provider what it holds under the key (classified)."""


@dataclass(frozen=True)
class Balance(Request[tuple[int, Any]]):
    """The provider's balance of `charge`: (status, body)."""

    charge: str


@dataclass(frozen=True)
class Begin(Request[Begun]):
    """Record the call about to be made, in the statement that checks the engaged kill
    switches and the abort (Begun says what stopped it), and say whether it was begun
    before."""


class Turn(Enum):
    """How a Claim ended."""

    # Nobody else held the call: it is this process's at once (or its row is gone).
    AT_ONCE = "at_once"
    # Another holder's call ended, or its lease lapsed, while this one waited: the
    # transaction may have moved on meanwhile, so it is asked again (Awaited).
    WAITED = "waited"
    # The wait was given up: the call is no longer this process's to make (its partition
    # was revoked; the new owner's take-over claims it), or the claim was refused (the
    # partition's owner took it after this process: call_fence). Nothing taken or sent.
    GIVEN_UP = "given_up"


@dataclass(frozen=True)
class Claim(Request[Turn]):
    """Wait while another process holds this call's lease (its call is on the wire, or
    may be), then hold it (services.dispatcher.call_lease); Turn says whether it waited
    or gave up."""


@dataclass(frozen=True)
class Awaited(Request[bool]):
    """Whether the transaction still waits on this very dispatch, by the live state of its
    partition's owner (transactions.unanswered.waits_on, the rule a resumed hold is judged
    by): False once its leg was answered or dispatched again, or the transaction finished.
    A state the host does not know (its partition is not its own) is taken to wait."""


@dataclass(frozen=True)
class Hold(Request[None]):
    """Hold the dispatch for the engaged switches that stopped its begin (it is dispatched
    through the gate again once they are released)."""

    switches: tuple[str, ...]


@dataclass(frozen=True)
class Apply(Request[Seen]):
    """Call the provider (classified answer)."""


@dataclass(frozen=True)
class Sleep(Request[None]):
    seconds: float


@dataclass(frozen=True)
class Report(Request[None]):
    """Send an observation of this attempt (dispatch_observation builds it)."""

    source: Source
    seen: Seen
    # Lookups made so far: part of the observation's id.
    lookups: int


@dataclass(frozen=True)
class Review(Request[None]):
    """Ask a person instead of calling, with what was seen as the evidence."""

    reason: str
    seen: Seen
    lookups: int


Plan = Generator[Request[Any], Any, None]


def ask(request: Request[Answer]) -> Generator[Request[Any], Any, Answer]:
    """`answer = yield from ask(request)`: the request's answer, typed."""
    return cast(Answer, (yield request))


def call_plan(dispatch: OperationDispatched, *, adapter_known: bool = True) -> Plan:
    """The requests one dispatch makes, in order; see the module docstring."""
    if not adapter_known:
        # Intake refuses unknown providers; reaching here means configuration changed
        # under a live transaction. Unknown, never failed: a person decides.
        error = f"no adapter for provider {dispatch.provider!r}"
        yield Report(Source.RESPONSE, Seen(Outcome.UNKNOWN, error=error), 0)
        return
    # What the events recorded when the step was accepted (events.legacy_facts), so a
    # redelivery is judged by the class the step was approved under.
    info = recorded_facts(dispatch.facts, dispatch.operation)
    if not (yield from ask(Gate())):
        return
    # A new attempt re-checks what held when the first was approved (its balance).
    charge = balance_needed(dispatch.operation, dispatch.payload) if dispatch.attempt > 1 else None
    if not dispatch.lookup_first and charge is None:
        # Nothing to ask before the begin: the statement that begins the call says whether
        # it was begun before. A first send is called at once; a redelivery is looked up.
        begun = yield from ask(Begin())
        if not begun.existed:
            yield from _call(info, begun, redelivered=False, lookups=0)
            return
        redelivered = True
    else:
        # Judged by what happened, not by an offset: a row means a call may have been made.
        redelivered = yield from ask(WasBegun())
    lookups = 0
    if redelivered:
        # A call of this attempt was begun: its caller may still be on the wire (an owner
        # that lost the partition mid-call). Looked up only once it is not.
        if not (yield from _claimed()):
            return
    if dispatch.lookup_first or redelivered:
        lookups += 1
        if (yield from _found(lookups)):
            return
        if redelivered and not redelivery_may_apply(info):
            yield _not_resent(lookups)
            return
        if redelivered and not (yield from _still_awaited()):
            return
    if charge is not None:
        status, body = yield from ask(Balance(charge))
        stopped = judge_balance(dispatch.payload, status, body)
        if stopped is not None:
            # Unreadable: asked again later. No longer true: the operation stays open for a
            # person, whose `retry` makes the attempt once the world is right.
            if stopped.outcome is Outcome.UNKNOWN:
                yield Report(Source.RESPONSE, stopped, lookups)
            else:
                yield Review(PRECONDITION_FAILED, stopped, lookups)
            return
    # The last gate, after the lookup and the precondition's provider call: the kill
    # switches and the transaction's abort, checked by the statement that records the call.
    begun = yield from ask(Begin())
    yield from _call(info, begun, redelivered=redelivered, lookups=lookups)


def _call(info: Classified, begun: Begun, *, redelivered: bool, lookups: int) -> Plan:
    """What a begin allows: nothing (superseded), hold, the abort's answer, not twice, or
    the call."""
    if begun.superseded:
        # A zombie's call: the partition's owner calls what its live state waits on.
        return
    if begun.aborted:
        # Never begun, never to be: a definitive "not applied" the decider reads as the
        # abort (events.aborted_before_call).
        yield Report(Source.RESPONSE, Seen(Outcome.REJECTED, error=ABORTED_BEFORE_CALL), lookups)
        return
    if begun.switches:
        yield Hold(begun.switches)
        return
    if not begun.written and not redelivered:
        # Another dispatcher began this very call meanwhile (a zombie, a lost lease).
        if not redelivery_may_apply(info):
            yield _not_resent(lookups)
            return
        # Its call ends (or its lease lapses) before this one looks, and sends if absent.
        if not (yield from _claimed()):
            return
        lookups += 1
        if (yield from _found(lookups)):
            return
        if not (yield from _still_awaited()):
            return
    seen = yield from ask(Apply())
    yield Report(Source.RESPONSE, seen, lookups)
    if seen.outcome is Outcome.UNKNOWN:
        yield from _resolve(lookups)


def _claimed() -> Generator[Request[Any], Any, bool]:
    """Claim the call; True: go on and look it up. After a wait, only while the transaction
    still waits on it: the judgement that dispatched it (or resumed it, or took it over) is
    as old as the other holder's call, and the one that counts is the live state's.
    A crash after the claim, before the question: the claim's lease lapses, and the next
    owner's take-over runs only what its restored state still waits on. A decision between
    the question and the call (the lookup, a begin) is the window every call has."""
    turn = yield from ask(Claim())
    match turn:
        case Turn.AT_ONCE:
            return True
        case Turn.WAITED:
            return (yield from _still_awaited())
        case Turn.GIVEN_UP:
            return False
        case _:
            assert_never(turn)


def _still_awaited() -> Generator[Request[Any], Any, bool]:
    """True while the transaction still waits on the call (Awaited, in memory), asked by a
    claim that waited and by a redelivery before it sends what its lookup found absent.
    Either was judged on an older state (the one the take-over restored, the begin that
    found another caller's row, the one before the wait), and the leg may have moved since:
    a person failed the transaction, or the call's own answer reached the owner, a decline
    that leaves no effect to find. A provider that answers a declined key's resend afresh
    would then make an effect nobody waits for (the simulator's `afresh` provider: seeds 65
    and 637 sent a declined charge again after TransactionFailed). What is left is the
    window between the question and the call, which every call has."""
    return (yield from ask(Awaited()))


def _found(lookups: int) -> Generator[Request[Any], Any, bool]:
    """Look up; an effect found (or a lookup that could not tell) is reported and settles
    the call: True, nothing more is sent."""
    seen = yield from ask(Lookup())
    if seen.outcome is Outcome.ABSENT:
        return False
    yield Report(Source.LOOKUP, seen, lookups)
    if seen.outcome is not Outcome.SUCCEEDED:
        yield from _resolve(lookups)
    return True


def _not_resent(lookups: int) -> Report:
    """A previous call of this attempt was begun and may still land: for a destructive
    operation "absent" is not proof enough to call again."""
    return Report(Source.LOOKUP, Seen(Outcome.UNKNOWN, error=NOT_RESENT), lookups)


def _resolve(lookups: int) -> Plan:
    seen: Seen | None = None
    for delay in LOOKUP_BACKOFF_S:
        yield Sleep(delay)
        lookups += 1
        seen = yield from ask(Lookup())
        if seen.outcome in (Outcome.SUCCEEDED, Outcome.ABSENT):
            break
    if seen is not None:
        yield Report(Source.LOOKUP, seen, lookups)


def dispatch_observation(
    envelope: Envelope, dispatch: OperationDispatched, report: Report, observed_at: datetime
) -> OperationObserved:
    """The observation a Report sends. Same call, same sighting, same id: a redone call's
    duplicate is recognised."""
    return observation(
        message_id=dispatch_observation_id(
            dispatch.op_key,
            dispatch.attempt,
            report.source.value,
            report.seen.outcome.value,
            report.lookups,
        ),
        tenant=envelope.tenant,
        tx_id=envelope.tx_id,
        action=dispatch.action,
        op_key=dispatch.op_key,
        attempt=dispatch.attempt,
        source=report.source,
        seen=report.seen,
        observed_at=observed_at,
        by_dispatcher=True,
    )
