"""A tenant's policy as data (docs/design.md, "Governance"; docs/contract.md, "v1 additions").

One versioned document per tenant says, per agent: which operations it is granted (least
privilege: `write` and `destructive` operations of events.catalog are denied unless
granted, `read` ones are allowed), its quotas per window in count and in amount, and which
classes need approval on top of the deployment's RECON_APPROVAL_REQUIRED (a tenant may ask
for more approvals, never fewer: services.intake.policy.approval_classes).

No document for a tenant means today's behaviour: every operation of the catalog granted,
no quota, approvals as RECON_APPROVAL_REQUIRED says (`open_policy`). A tenant opts into
least privilege by installing a document; agents it does not name get `default` (or,
without one, reads only).
"""

from collections.abc import Iterable
from datetime import datetime
from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from events.catalog import Reversibility, SideEffect

NAME = Annotated[str, Field(min_length=1, max_length=128)]
APPROVAL_CLASSES = frozenset({*(s.value for s in SideEffect), *(r.value for r in Reversibility)})


class _Doc(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Quota(_Doc):
    """At most `max_count` dispatches and `max_amount` (the payload's integer `amount`, in
    minor units) of `operation` per agent in any `window_s` seconds; either may be left out."""

    operation: NAME
    window_s: int = Field(gt=0, le=366 * 86400)
    max_count: int | None = Field(default=None, ge=0)
    max_amount: int | None = Field(default=None, ge=0)


class AgentPolicy(_Doc):
    # Operation names; which ones exist is the configured catalog's word, checked when a
    # document is installed (services.intake.policy), not here: a document stored under an
    # earlier configuration must still be readable.
    grants: tuple[NAME, ...] = ()
    quotas: tuple[Quota, ...] = ()


class TaskGrant(_Doc):
    """What one task may do (least privilege per task, issue 22 item 2): a submission that
    names the task may only ask for `grants` (reads aside), each call at most `max_amount`
    (in minor units, in the field its provider declares: OperationInfo.amount_field), and
    only until `expires_at`. It narrows, never widens: the agent must be granted the
    operation too. Removing the task from the document revokes it; both expiry and
    revocation stop calls not yet made."""

    grants: tuple[NAME, ...] = ()
    max_amount: int | None = Field(default=None, ge=0)
    # Required: a task's authority is bounded in time by construction.
    expires_at: AwareDatetime

    def expired(self, now: datetime) -> bool:
        return now >= self.expires_at


class PolicyDocument(_Doc):
    # 0 only for `open_policy` (no document installed); an installed one starts at 1.
    version: int = Field(ge=0)
    agents: dict[NAME, AgentPolicy] = Field(default_factory=dict)
    # For agents the document does not name; None: they may only read.
    default: AgentPolicy | None = None
    approval_required: tuple[str, ...] = ()
    # Per task id: its grant (TaskGrant); a submission naming a task absent here is refused.
    tasks: dict[NAME, TaskGrant] = Field(default_factory=dict)

    @field_validator("approval_required")
    @classmethod
    def _classes_known(cls, classes: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(classes) - APPROVAL_CLASSES)
        if unknown:
            raise ValueError(f"unknown classes {unknown}; known: {sorted(APPROVAL_CLASSES)}")
        return classes

    def operations(self) -> frozenset[str]:
        """Every operation name the document grants or puts a quota on."""
        agents = [*self.agents.values(), *([self.default] if self.default else [])]
        return frozenset(
            name
            for agent in agents
            for name in (*agent.grants, *(quota.operation for quota in agent.quotas))
        ) | frozenset(name for task in self.tasks.values() for name in task.grants)

    def for_agent(self, agent_id: str) -> tuple[str, AgentPolicy]:
        """The rule that applies to `agent_id` (its path in the document) and its content."""
        if agent_id in self.agents:
            return f"agents.{agent_id}", self.agents[agent_id]
        if self.default is not None:
            return "default", self.default
        return "default", AgentPolicy()


def open_policy(operations: Iterable[str]) -> PolicyDocument:
    """What a tenant without a document gets: the behaviour before policies existed, every
    operation of the catalog (`operations`: its names) granted."""
    return PolicyDocument(
        version=0,
        default=AgentPolicy(grants=tuple(operations)),
    )
