"""The policy document (events/policy.py) refuses what it cannot enforce: a class no
operation has, a malformed quota; installing one that names an operation no configured
provider offers is refused (services.intake.policy); and it names the rule that applies."""

import pytest
from pydantic import ValidationError
from support.catalogs import SANDBOX

from events.policy import AgentPolicy, PolicyDocument, open_policy
from services.intake.errors import ApiError
from services.intake.policy import refuse_unknown_operations
from services.intake.submission_gate import approval_classes


@pytest.mark.parametrize(
    "document",
    [
        {"version": 1, "agents": {"a": {"quotas": [{"operation": "payments.charge"}]}}},
        {"version": 1, "approval_required": ["dangerous"]},
        {"version": -1},
        {"version": 1, "agents": {"a": {"grants": [], "extra": True}}},
    ],
)
def test_a_document_recon_cannot_enforce_is_refused(document: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        PolicyDocument.model_validate(document)


@pytest.mark.parametrize(
    "document",
    [
        {"version": 1, "agents": {"a": {"grants": ["payments.chrage"]}}},
        {"version": 1, "default": {"quotas": [{"operation": "x.y", "window_s": 60}]}},
    ],
)
def test_a_document_naming_an_operation_no_provider_offers_is_not_installed(
    document: dict[str, object],
) -> None:
    # Readable (a document stored under an earlier configuration must stay so), but not
    # installed: a typo would grant nothing, silently.
    parsed = PolicyDocument.model_validate(document)
    with pytest.raises(ApiError) as refused:
        refuse_unknown_operations(parsed, SANDBOX)
    assert (refused.value.status, refused.value.code) == (422, "unknown_operation")
    assert "payments.charge" in refused.value.message  # the known ones are listed
    good = {"version": 1, "agents": {"a": {"grants": ["payments.charge"]}}}
    refuse_unknown_operations(PolicyDocument.model_validate(good), SANDBOX)


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
    assert approval_classes(open_policy(()), frozenset()) == frozenset()
