"""Accepting a submission, whichever door it came through: the HTTP route
(services.intake.transactions) and the Kafka intents topic (services.intake.kafka_intents)
run this one function, so a body is validated, guarded and turned into the same
SubmitTransaction (same op keys) either way, and refused with the same error codes.

A refusal raises ApiError or SubmissionRefused (both carry the API's error code); nothing
is recorded before every check has passed.
"""

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import asyncpg
from pydantic import ValidationError

from events.catalog import Catalog
from events.definition import OperationSpec
from events.keys import default_session
from events.policy import PolicyDocument
from services import tracing
from services.crash_points import INTAKE_AFTER_CLAIM, crash_point
from services.intake import intents, resource_owners, submission_gate
from services.intake.errors import ApiError, invalid_request
from services.intake.intent_claims import IntentClaims
from services.intake.policy_cache import PolicyCache
from services.intake.produce import Producing, produce_command
from services.intake.produced_marks import ProducedMarks
from services.intake.submission import (
    SubmissionRefused,
    SubmissionRequest,
    check,
    operation_specs,
    submit_command,
)
from services.intake.tenant_store import TenantStore
from services.providers.registry import catalog_of

if TYPE_CHECKING:
    # For annotations only: services.intake.auth holds the HTTP door's FastAPI dependencies,
    # which the Kafka intents reader (it runs this module too) would import at start for
    # nothing (~0.17 s of CPU).
    from services.intake.auth import Principal

log = logging.getLogger(__name__)


# How many times a submission is checked again when its tenant's policy changed between
# the check and the recording statement (intents.PolicyMoved); past that, 503 and retry.
POLICY_RECHECKS = 3


class Accepting(Producing, Protocol):
    """What accepting a submission reads from a door's state (the HTTP app's, or the Kafka
    door's: services.intake.kafka_intents.DoorState), besides what producing reads."""

    @property
    def pool(self) -> asyncpg.Pool: ...
    @property
    def policies(self) -> PolicyCache: ...
    @property
    def intent_claims(self) -> IntentClaims: ...
    @property
    def produced_marks(self) -> ProducedMarks: ...


@dataclass(frozen=True)
class Plan:
    """A submission checked against its tenant's policy, with what it would record."""

    policy: PolicyDocument
    # The policy's stamp (services.intake.submission_gate.InForce), which the intent is
    # recorded under.
    policy_stamp: str
    fingerprint: str
    specs: tuple[OperationSpec, ...]
    # The configured providers' catalog the submission was judged by.
    catalog: Catalog


async def plan(
    state: Accepting, tenant: str, submission: SubmissionRequest, *, fresh: bool = True
) -> Plan:
    """Check `submission` (the tenant's policy decides which steps wait for approval) and
    derive its fingerprint and operations; nothing is recorded. Shared by the submission
    and the preview, so a preview's digest and approvals are those of the submission.
    `fresh=False`: under the policy as this process last read it (state.policies), which
    only a submission may use, since its recording statement checks the policy is still
    the one in force (services.intake.policy_cache)."""
    settings = state.settings
    catalog = catalog_of(settings)
    policies = state.policies
    in_force = None if fresh else policies.known(tenant)
    # A charge, record or waitlist named in a payload must be the tenant's own (one
    # judge for the submission, the preview and the Kafka door alike).
    unheld = resource_owners.unheld(tenant, submission, settings.tenant_resources)
    # A connection only for what needs a statement: a submission under a known policy
    # naming no resource takes none from the pool (issue 24).
    if in_force is None or unheld:
        async with state.pool.acquire() as conn:
            if in_force is None:
                in_force = await policies.read(conn, tenant, catalog)
            await resource_owners.refuse_foreign(TenantStore(conn, tenant), unheld)
    document = in_force.document
    approval_required = submission_gate.approval_classes(document, settings.approval_required)
    check(submission, catalog, approval_required)
    try:
        fingerprint = submission.fingerprint()
    except ValueError:
        raise ApiError(
            422, "invalid_request", "payloads must not contain NaN or Infinity"
        ) from None
    specs = operation_specs(
        submission,
        tenant=tenant,
        environment=settings.environment,
        catalog=catalog,
        approval_required=approval_required,
    )
    return Plan(document, in_force.stamp, fingerprint, specs, catalog)


async def accept_submission(
    state: Accepting,
    tenant: str,
    raw: bytes,
    *,
    keyed_tx_id: str | None = None,
    who: "Principal | None" = None,
) -> dict[str, Any]:
    """Validate `raw`, claim its tx_id, produce its command and wait for Kafka's ack; the
    answer is the 202 body. `state`: the door's (`Accepting`).
    `keyed_tx_id`: the tx_id the Kafka record's key names, which the body must name too.
    `who`: the API key's principal (HTTP); the body's `agent_id` must be one it speaks
    for, and it is recorded as the submitter, whom separation of duties judges."""
    settings = state.settings
    try:
        submission = SubmissionRequest.model_validate_json(raw)
    except ValidationError as exc:
        raise invalid_request(exc.errors()) from None
    if keyed_tx_id is not None and keyed_tx_id != submission.tx_id:
        raise ApiError(
            422,
            "invalid_request",
            f"the record key names tx_id {keyed_tx_id!r} but the body {submission.tx_id!r}; "
            "key the record <tenant>/<tx_id> of its body",
        )
    if who is not None:
        who.speak_for(submission.agent_id)
    # Checked under the policy as this process last read it, then under a fresh read when
    # that one refused or the recording statement found another one in force.
    fresh = False
    for _ in range(POLICY_RECHECKS + 1):
        try:
            checked = await plan(state, tenant, submission, fresh=fresh)
            # The policy gate: an ungranted operation is refused (403) with nothing
            # recorded, not even the intent row.
            submission_gate.refuse_ungranted(checked.policy, checked.catalog, submission)
        except (submission_gate.GateRefused, SubmissionRefused):
            if fresh:
                raise
            # Only the policy in force refuses: the one last read may be outdated.
            fresh = True
            continue
        tracing.annotate(tx_id=submission.tx_id, op_keys=",".join(s.op_key for s in checked.specs))
        intent = _intent(tenant, submission, checked, who)
        try:
            # The operations as claimed: a step whose natural key another transaction
            # holds with another payload now waits for a person (events.intent_identity).
            specs = await state.intent_claims.claim(intent, settings.pending_horizon_s)
            break
        except intents.PolicyMoved:
            log.info("%s: the tenant's policy changed; checking again", submission.tx_id)
            fresh = True
    else:
        raise ApiError(
            503,
            "unavailable",
            "the tenant's policy kept changing while the submission was checked; retry the request",
        )
    crash_point(INTAKE_AFTER_CLAIM)
    # An identical resubmission produces again: it is harmless (the decider accepts only
    # the first SubmitTransaction of a tx_id) and it covers a crash between the insert
    # above and the broker's acknowledgement of an earlier attempt.
    command = submit_command(
        submission,
        tenant=tenant,
        fingerprint=intent.fingerprint,
        operations=specs,
        issued_at=datetime.now(UTC),
        lease_s=settings.owner_lease_s,
        submitted_by=intent.submitted_by,
    )
    await produce_command(state, command, "the intent")
    # The second write: a crash before it leaves the row unacknowledged, which the same
    # body retried produces again and another body may take over after the pending
    # horizon (services.intake.intents).
    await state.produced_marks.mark(intent)
    log.info("%s accepted: %s", submission.tx_id, " ".join(s.op_key for s in specs))
    return {
        "tx_id": submission.tx_id,
        "status": "accepted",
        "operations": [{"action": s.action, "op_key": s.op_key} for s in specs],
        # The owning session; the HTTP route adds its owner token (services.intake.owner_token).
        "owner": {"agent_id": submission.agent_id, "session_id": intent.session_id},
    }


def _intent(
    tenant: str, submission: SubmissionRequest, checked: Plan, who: "Principal | None"
) -> intents.Intent:
    return intents.Intent(
        tenant,
        submission.tx_id,
        checked.fingerprint,
        submission.agent_id,
        checked.specs,
        policy_version=checked.policy.version,
        policy_stamp=checked.policy_stamp,
        session_id=submission.session_id or default_session(submission.agent_id),
        submitted_by=who.name if who is not None else None,
        task_id=submission.task_id,
        natural_key_windows={
            spec.action: info.natural_key_window_s
            for spec in checked.specs
            if (info := checked.catalog.info(spec.provider, spec.operation)) is not None
        },
    )
