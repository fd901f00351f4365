"""The side-effect class of an operation drives what a machine may do with an unknown:
reads are asked again, writes re-sent under their key after a lookup proved absence,
destructive operations never re-sent (events.retry_policy)."""

from support.catalogs import sandbox_catalog
from support.txbuilders import T0, observed, request_review, resolve

from events.catalog import OperationFacts, OperationInfo, Reversibility, SideEffect
from events.definition import OperationKind, OperationSpec, OpStatus, Resolution
from events.inputs import Outcome, Source, SubmitTransaction
from events.keys import op_key
from events.retry_policy import may_resend, redelivery_may_apply, resend_without_lookup
from events.transaction_events import OperationDispatched
from transactions.state import TransactionState
from transactions.transaction import decide, handle, initial_state
from transactions.unanswered import unanswered


def one_step(
    action: str, operation: str, payload: dict[str, str], facts: OperationFacts | None = None
) -> SubmitTransaction:
    """A transaction of one step, under the key observed() uses."""
    key = op_key(tenant="demo", environment="test", provider="sandbox", tx_id="tx-1", action=action)
    step = OperationSpec(
        action=action,
        kind=OperationKind.STEP,
        provider="sandbox",
        operation=operation,
        payload=payload,
        op_key=key,
        facts=facts,
    )
    return SubmitTransaction(
        message_id="cmd-tx-1",
        tenant="demo",
        tx_id="tx-1",
        agent_id="agent-1",
        fingerprint="f" * 64,
        operations=(step,),
        issued_at=T0,
    )


def destructive_submit() -> SubmitTransaction:
    """One step, the irreversible records.delete."""
    return one_step("wipe", "records.delete", {"resource": "rec-1"})


def read_submit() -> SubmitTransaction:
    """One step, a read (recorded facts: no effect a lookup could find)."""
    read = OperationFacts(side_effect=SideEffect.READ, reversibility=Reversibility.REVERSIBLE)
    return one_step("peek", "balances.get", {"account": "acct-1"}, read)


def run(*inputs: object) -> TransactionState:
    state = initial_state("demo", "tx-1")
    for message in inputs:
        state, _ = handle(state, message)  # type: ignore[arg-type]
    return state


def test_catalog_declares_the_sandbox_classes_per_provider() -> None:
    catalog = sandbox_catalog("sandbox", "sandbox-eu")
    operation_info = catalog.facts
    promote = operation_info("sandbox", "waitlist.promote")
    assert (promote.side_effect, promote.reversibility) == (
        SideEffect.DESTRUCTIVE,
        Reversibility.COMPENSATING_ONLY,
    )
    delete = operation_info("sandbox", "records.delete")
    assert (delete.side_effect, delete.reversibility) == (
        SideEffect.DESTRUCTIVE,
        Reversibility.IRREVERSIBLE,
    )
    # Another configured provider of the sandbox's adapter: the same declaration.
    assert operation_info("sandbox-eu", "payments.charge").side_effect is SideEffect.WRITE
    # An operation nobody declared, or at a provider not configured, is never sent twice.
    assert operation_info("sandbox", "nope").side_effect is SideEffect.DESTRUCTIVE
    assert operation_info("elsewhere", "payments.charge").side_effect is SideEffect.DESTRUCTIVE


def test_policy_table() -> None:
    read = OperationInfo("x.get", SideEffect.READ, Reversibility.REVERSIBLE)
    write = OperationInfo("x.put", SideEffect.WRITE, Reversibility.REVERSIBLE)
    destroy = OperationInfo("x.rm", SideEffect.DESTRUCTIVE, Reversibility.IRREVERSIBLE)
    assert resend_without_lookup(read) and not resend_without_lookup(write)
    assert may_resend(read, 4) and not may_resend(read, 5)
    assert may_resend(write, 2) and not may_resend(write, 3)
    assert not may_resend(destroy, 1)
    assert redelivery_may_apply(write) and not redelivery_may_apply(destroy)


def test_destructive_unknown_proven_absent_is_not_resent_and_stays_unknown() -> None:
    state = run(destructive_submit(), observed("wipe", 1, Outcome.UNKNOWN))
    events = decide(state, observed("wipe", 1, Outcome.ABSENT, 1, Source.LOOKUP))
    # A write would be re-sent here (test_absent_lookup_redispatches_...); a delete is not.
    assert [e.type for e in events] == ["EvidenceRecorded"]
    state = run(
        destructive_submit(),
        observed("wipe", 1, Outcome.UNKNOWN),
        observed("wipe", 1, Outcome.ABSENT, 1, Source.LOOKUP),
    )
    wipe = state.operation("wipe")
    assert wipe is not None and wipe.status is OpStatus.UNKNOWN
    # A later lookup that finds the effect settles it.
    events = decide(state, observed("wipe", 1, Outcome.SUCCEEDED, 2, Source.LOOKUP))
    assert [e.type for e in events] == ["OperationConfirmed", "TransactionCommitted"]


def test_a_read_is_never_looked_up_first_whoever_sends_it_again() -> None:
    """Every dispatch of a read carries lookup_first=False, the machine's resend and a
    person's retry alike (events.retry_policy.looks_up_first, the one rule), so a decider
    taking the partition rebuilds the very dispatch committed (transactions.unanswered)."""
    inputs: list[object] = [read_submit()]
    dispatched: list[OperationDispatched] = []
    for attempt in range(1, 6):
        state = run(*inputs)
        events = decide(state, observed("peek", attempt, Outcome.UNKNOWN))
        dispatched += [e for e in events if isinstance(e, OperationDispatched)]
        inputs.append(observed("peek", attempt, Outcome.UNKNOWN))
    assert [d.attempt for d in dispatched] == [2, 3, 4, 5]  # then the budget is spent
    inputs.append(request_review("peek", 5))
    events = decide(run(*inputs), resolve("peek", 5, Resolution.RETRY))
    retried = [e for e in events if isinstance(e, OperationDispatched)]
    assert [d.attempt for d in retried] == [6]
    assert not any(d.lookup_first for d in dispatched + retried)
    inputs.append(resolve("peek", 5, Resolution.RETRY))
    assert unanswered(run(*inputs)) == retried
