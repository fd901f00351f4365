"""The task rule of the policy gate (issue 22, item 2), on the pure judge the intake and the
dispatcher share (services.governance.gate.task_refusal): a task narrows its agent's
grants, never widens them; outside it, expired or revoked, the rule is named."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from support.catalogs import SANDBOX_NAMES, sandbox_catalog

from events.catalog import SideEffect
from events.policy import AgentPolicy, PolicyDocument, TaskGrant
from services.governance.gate import (
    Named,
    Verdict,
    dispatch_verdict,
    submission_refusal,
    task_refusal,
)

CATALOG = sandbox_catalog("sandbox")
OPERATIONS = sorted(SANDBOX_NAMES)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def document(
    task: TaskGrant | None, agent_grants: tuple[str, ...] = tuple(OPERATIONS)
) -> PolicyDocument:
    return PolicyDocument(
        version=3,
        agents={"a": AgentPolicy(grants=agent_grants)},
        tasks={} if task is None else {"t": task},
    )


def refusal_at_call(policy: PolicyDocument, operation: str, amount: int | None = 0) -> str | None:
    decision = dispatch_verdict(
        policy,
        (),
        agent_id="a",
        provider="sandbox",
        operation=operation,
        forward=True,
        side_effect=CATALOG.facts("sandbox", operation).side_effect,
        task_id="t",
        amount=amount,
        now=NOW,
    )
    return None if decision.verdict is Verdict.DISPATCH else decision.reason


@given(
    task_grants=st.lists(st.sampled_from(OPERATIONS), unique=True).map(tuple),
    agent_grants=st.lists(st.sampled_from(OPERATIONS), unique=True).map(tuple),
    operation=st.sampled_from(OPERATIONS),
)
def test_a_task_call_needs_both_the_agent_and_the_task_grant(
    task_grants: tuple[str, ...], agent_grants: tuple[str, ...], operation: str
) -> None:
    policy = document(
        TaskGrant(grants=task_grants, expires_at=NOW + timedelta(days=1)), agent_grants
    )
    read = CATALOG.facts("sandbox", operation).side_effect is SideEffect.READ
    allowed = read or (operation in task_grants and operation in agent_grants)
    assert (refusal_at_call(policy, operation) is None) == allowed
    door = submission_refusal(
        policy, CATALOG, "a", [Named("sandbox", operation)], task_id="t", now=NOW
    )
    assert (door is None) == allowed


def test_revoked_expired_and_capped_tasks_name_their_rule() -> None:
    grant = TaskGrant(grants=("payments.charge",), max_amount=100, expires_at=NOW)
    expired = task_refusal(
        document(grant),
        "t",
        agent_id="a",
        operation="payments.charge",
        side_effect=SideEffect.WRITE,
        amount=1,
        now=NOW,
    )
    assert expired is not None and (expired.error, expired.rule) == (
        "task_expired",
        "tasks.t.expires_at",
    )
    live = grant.model_copy(update={"expires_at": NOW + timedelta(seconds=1)})
    capped = task_refusal(
        document(live),
        "t",
        agent_id="a",
        operation="payments.charge",
        side_effect=SideEffect.WRITE,
        amount=101,
        now=NOW,
    )
    assert capped is not None and capped.rule == "tasks.t.max_amount"
    assert refusal_at_call(document(live), "payments.charge", amount=None) == "not_granted"
    assert refusal_at_call(document(live), "payments.charge", amount=100) is None
    assert refusal_at_call(document(None), "payments.charge") == "task_unknown"
    assert refusal_at_call(document(grant), "payments.charge") == "task_expired"


def test_an_undo_is_never_stopped_by_its_task() -> None:
    decision = dispatch_verdict(
        document(None),
        (),
        agent_id="a",
        provider="sandbox",
        operation="payments.refund",
        forward=False,
        side_effect=SideEffect.WRITE,
        task_id="t",
        amount=5,
        now=NOW,
    )
    assert decision.verdict is Verdict.DISPATCH


def test_a_declared_undo_is_within_its_steps_task() -> None:
    live = TaskGrant(grants=("payments.charge",), expires_at=NOW + timedelta(days=1))
    named = [
        Named("sandbox", "payments.charge", amount=10),
        Named("sandbox", "payments.refund", compensation_of="payments.charge"),
    ]
    assert submission_refusal(document(live), CATALOG, "a", named, task_id="t", now=NOW) is None
