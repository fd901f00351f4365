"""The grant check of submissions, before anything is recorded (docs/contract.md, "v1
additions"): the tenant's policy document in force, what it asks approval for, and the 403
refusal of an operation outside its agent's grant. Apart from the `/v1/policy` routes
(services.intake.policy) because the Kafka intents reader checks submissions too and serves
no HTTP: importing the routes made it import FastAPI at start (~0.2 s of CPU per stack)."""

from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from events.catalog import Catalog
from events.policy import PolicyDocument, open_policy
from services.governance import store
from services.governance.gate import Named, Refusal, amount_of, submission_refusal
from services.intake.submission import SubmissionRequest


class GateRefused(Exception):
    """A submission outside its agent's grant: 403 naming the rule."""

    # The one status of this refusal, for the HTTP door (install) and the Kafka door.
    status = 403

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


def named_operations(submission: SubmissionRequest, catalog: Catalog) -> list[Named]:
    named: list[Named] = []
    for _, op in submission.operations():
        # The amount in the field its provider declares (as quotas read it at the call).
        info = catalog.info(op.provider, op.operation)
        amount = amount_of(op.payload, info.amount_field if info else "amount")
        named.append(Named(op.provider, op.operation, amount=amount))
        if op.compensation is not None:
            named.append(
                Named(op.provider, op.compensation.operation, compensation_of=op.operation)
            )
    return named


@dataclass(frozen=True)
class InForce:
    """A tenant's policy document as read, with the stamp that tells it from any other."""

    document: PolicyDocument
    # The installed row's `version:digest`, "" when none is installed (the open policy):
    # what services.intake.intents holds a submission's recording statement to, in SQL
    # (intents.stamp_in_force), so both sides must spell it the same way.
    stamp: str


async def in_force(conn: asyncpg.Connection, tenant: str, catalog: Catalog) -> InForce:
    """The tenant's policy document, or the open one (every operation of `catalog`) when
    none is installed."""
    installed = await store.policy_of(conn, tenant)
    if installed is None:
        return InForce(open_policy(catalog.names()), "")
    return InForce(installed.document, f"{installed.document.version}:{installed.digest}")


def approval_classes(policy: PolicyDocument, floor: frozenset[str]) -> frozenset[str]:
    """What needs approval: the deployment's RECON_APPROVAL_REQUIRED (`floor`) and whatever
    the tenant's document adds. A tenant may ask for more approvals, never for fewer."""
    return floor | frozenset(policy.approval_required)


def refuse_ungranted(
    policy: PolicyDocument, catalog: Catalog, submission: SubmissionRequest
) -> None:
    """Raise GateRefused (403) when the submission names an operation its agent (or the
    task it names) is not granted; called before the intent row is written and before
    anything is produced."""
    refusal = submission_refusal(
        policy,
        catalog,
        submission.agent_id,
        named_operations(submission, catalog),
        task_id=submission.task_id,
        now=datetime.now(UTC),
    )
    if refusal is not None:
        raise GateRefused(refusal)
