"""The policy document (events/policy.py) refuses what it cannot enforce: an operation the
catalog does not know, a class no operation has; and names the rule that applies."""

import pytest
from pydantic import ValidationError

from events.policy import AgentPolicy, PolicyDocument, open_policy
from services.intake.policy import approval_classes


@pytest.mark.parametrize(
    "document",
    [
        {"version": 1, "agents": {"a": {"grants": ["payments.chrage"]}}},
        {"version": 1, "agents": {"a": {"quotas": [{"operation": "x.y", "window_s": 60}]}}},
        {"version": 1, "agents": {"a": {"quotas": [{"operation": "payments.charge"}]}}},
        {"version": 1, "approval_required": ["dangerous"]},
        {"version": -1},
        {"version": 1, "agents": {"a": {"grants": [], "extra": True}}},
    ],
)
def test_a_document_recon_cannot_enforce_is_refused(document: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        PolicyDocument.model_validate(document)


def test_the_rule_for_an_agent_is_its_own_else_the_default_else_reads_only() -> None:
    own = AgentPolicy(grants=("payments.charge",))
    fallback = AgentPolicy(grants=("email.send",))
    document = PolicyDocument(version=1, agents={"agent-7": own}, default=fallback)
    assert document.for_agent("agent-7") == ("agents.agent-7", own)
    assert document.for_agent("agent-9") == ("default", fallback)
    assert PolicyDocument(version=1).for_agent("agent-9") == ("default", AgentPolicy())


def test_a_tenant_document_adds_approvals_and_never_removes_the_deployments() -> None:
    floor = frozenset({"destructive"})
    silent = PolicyDocument(version=1)
    stricter = PolicyDocument(version=2, approval_required=("compensating_only",))
    assert approval_classes(silent, floor) == {"destructive"}
    assert approval_classes(stricter, floor) == {"destructive", "compensating_only"}
    assert approval_classes(open_policy(), frozenset()) == frozenset()
