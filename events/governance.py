"""Governance changes as records on recon.governance, keyed by tenant: a policy replaced, a
kill switch engaged or released, a quota breaker reset. They are not a transaction's state
transitions (a kill switch concerns every transaction of its scope), so they travel on their
own topic, as drift does; recon.events keeps its single writer, the decider.

Each record's id is derived from what it records, so a change produced twice (a client
retrying after a lost answer) is recognisably the same change.
"""

from typing import Any, Literal

from events.model import Message


class PolicyReplaced(Message):
    """A tenant's policy document replaced by an operator (the whole new version)."""

    type: Literal["PolicyReplaced"] = "PolicyReplaced"
    schema_version: Literal[1] = 1
    change_id: str  # policy:<tenant>:<version>:<digest>
    tenant: str
    version: int
    digest: str  # sha256 of the canonical document
    document: dict[str, Any]
    actor: str  # the operator, or `file:<path>` for the document loaded at start-up
    at: str


class KillSwitchEngaged(Message):
    """A kill switch engaged: no new provider call in its scope until released."""

    type: Literal["KillSwitchEngaged"] = "KillSwitchEngaged"
    schema_version: Literal[1] = 1
    change_id: str  # kill:<id>:engaged
    tenant: str
    switch_id: str
    scope: dict[str, str]
    reason: str
    actor: str
    at: str


class KillSwitchReleased(Message):
    """A kill switch released: work it held resumes through the gate."""

    type: Literal["KillSwitchReleased"] = "KillSwitchReleased"
    schema_version: Literal[1] = 1
    change_id: str  # kill:<id>:released
    tenant: str
    switch_id: str
    actor: str
    at: str


class BreakerReset(Message):
    """A quota breaker reset by an operator: the agent's operation may run again."""

    type: Literal["BreakerReset"] = "BreakerReset"
    schema_version: Literal[1] = 1
    change_id: str  # breaker:<tenant>:<agent>:<operation>:<tripped_at>:reset
    tenant: str
    agent_id: str
    operation: str
    actor: str
    at: str


GovernanceChange = PolicyReplaced | KillSwitchEngaged | KillSwitchReleased | BreakerReset
