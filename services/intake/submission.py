"""A submitted transaction: its request shape, the checks that need the deployment's
settings, and the SubmitTransaction command it becomes.

Pure: the clock reading and the tenant arrive as arguments.
"""

from collections.abc import Collection
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict

from events.approval_policy import DEFAULT_APPROVAL_REQUIRED, needs_approval
from events.canonical import fingerprint
from events.catalog import Catalog, OperationInfo
from events.definition import (
    ACTION_PATTERN,
    TX_ID_PATTERN,
    Compensation,
    OperationKind,
    OperationSpec,
)
from events.inputs import SubmitTransaction
from events.intent_identity import NATURAL_KEY_PATTERN
from events.keys import compensation_key, default_session, op_key, submit_id
from events.payload_check import payload_problem

MAX_OPERATIONS = 20


class SubmissionRefused(ValueError):
    """A well-formed submission this deployment refuses; `code` is the API's error code
    (services.intake.app answers it 422 with the message)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# Which names exist is the configured catalog's word, judged by `check` (422
# `unknown_operation`, naming the provider's operations); the OpenAPI document lists them
# as an enum (services.intake.openapi_catalog), so a client and a generated SDK see them.
OperationName = Annotated[str, Field(min_length=1, max_length=128)]


# An agent session id: printable, no spaces, as short as an agent id.
SESSION_PATTERN = r"^[A-Za-z0-9._:@/-]{1,128}$"
# A task's id, as the policy document's `tasks` names it (events.policy.TaskGrant).
TASK_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"


class _Request(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CompensationRequest(_Request):
    operation: OperationName
    payload: dict[str, Any] | None = None


class OperationRequest(_Request):
    action: Annotated[str, Field(pattern=ACTION_PATTERN)]
    provider: Annotated[str, Field(min_length=1)]
    operation: OperationName
    payload: dict[str, Any]
    compensation: CompensationRequest | None = None
    # The resource the step changes and the revision the agent planned against; sent to
    # the provider in the payload, which refuses a stale one for good (`stale_revision`).
    resource: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    # Strict: JSON's false is not revision 0 (pydantic's lax int takes a bool).
    expected_revision: Annotated[int, Strict(), Field(ge=0, le=2**53)] | None = None
    # The business identity of the effect (an order id, an invoice number): another tx_id
    # naming it for the same operation within the operation's window never reaches the
    # provider (events.intent_identity). Not sent to the provider.
    natural_key: (
        Annotated[
            str,
            Field(
                pattern=NATURAL_KEY_PATTERN,
                description=(
                    "the business identity of the effect (an order id, an invoice number); "
                    "a second submission of it under another tx_id is refused with "
                    "duplicate_intent"
                ),
            ),
        ]
        | None
    ) = None

    def provider_payload(self) -> dict[str, Any]:
        extra = {
            name: value
            for name, value in (
                ("resource", self.resource),
                ("expected_revision", self.expected_revision),
            )
            if value is not None
        }
        return {**self.payload, **extra}


class SubmissionRequest(_Request):
    tx_id: Annotated[str, Field(pattern=TX_ID_PATTERN)]
    agent_id: Annotated[str, Field(min_length=1, max_length=128)]
    steps: Annotated[list[OperationRequest], Field(min_length=1, max_length=MAX_OPERATIONS)]
    on_commit: Annotated[list[OperationRequest], Field(max_length=MAX_OPERATIONS)] = []
    on_compensated: Annotated[list[OperationRequest], Field(max_length=MAX_OPERATIONS)] = []
    # The agent's session (transactions.ownership); when absent, the agent's default
    # session (events.keys.default_session). Not part of the intent: the same body from
    # another session is the same intent.
    session_id: Annotated[str | None, Field(pattern=SESSION_PATTERN)] = None
    # The task the submission acts under (least privilege per task, issue 22 item 2): its
    # grant in the policy document bounds what may be asked, at the door and at each call.
    # Part of the intent: the same body under another task is another authority.
    task_id: Annotated[str | None, Field(pattern=TASK_ID_PATTERN)] = None

    def operations(self) -> list[tuple[OperationKind, OperationRequest]]:
        return (
            [(OperationKind.STEP, s) for s in self.steps]
            + [(OperationKind.ON_COMMIT, n) for n in self.on_commit]
            + [(OperationKind.ON_COMPENSATED, n) for n in self.on_compensated]
        )

    def fingerprint(self) -> str:
        # Over the validated model, so key order, whitespace and an omitted optional
        # field versus an explicit null do not make two identical intents differ.
        body = self.model_dump(mode="json", exclude={"session_id"})
        if body["task_id"] is None:
            del body["task_id"]  # an intent from before tasks existed keeps its fingerprint
        if not body["on_compensated"]:
            # Left out when empty, so an intent submitted before on_compensated existed
            # keeps its fingerprint: its retry is still recognised, not refused with 409.
            del body["on_compensated"]
        for kind in ("steps", "on_commit", "on_compensated"):
            for op in body.get(kind, ()):
                # Likewise a step without a revision check hashes as before they existed.
                for later in ("resource", "expected_revision", "natural_key"):
                    if op.get(later) is None:
                        op.pop(later, None)
        return fingerprint(body)


def check(
    submission: SubmissionRequest,
    catalog: Catalog,
    approval_required: Collection[str] = DEFAULT_APPROVAL_REQUIRED,
) -> None:
    """The checks that depend on the deployment (its providers' catalog); raise
    SubmissionRefused naming the fix. The one judge of every door: the HTTP route, the Kafka
    intents topic and the MCP tools (which call the HTTP route) all come here."""
    seen: set[str] = set()
    named: set[tuple[str, str]] = set()
    for _, op in submission.operations():
        if op.natural_key is not None:
            if (op.operation, op.natural_key) in named:
                raise SubmissionRefused(
                    "duplicate_natural_key",
                    f"action {op.action!r}: natural_key {op.natural_key!r} is named twice for "
                    f"{op.operation}; one business intent is one step",
                )
            named.add((op.operation, op.natural_key))
        if op.action in seen:
            raise SubmissionRefused(
                "duplicate_action",
                f"action {op.action!r} appears twice; actions must be unique across steps, "
                "on_commit and on_compensated",
            )
        seen.add(op.action)
        info = _declared(op, catalog)
        _check_payload(op, info)
        _check_compensation(op, catalog, approval_required)
    _check_irreversible_steps(submission)
    _check_gated_notifications(submission, catalog, approval_required)


def _declared(op: OperationRequest, catalog: Catalog) -> OperationInfo:
    """What `op`'s provider declares of its operation, or the refusal naming what exists."""
    if op.provider not in catalog.providers():
        raise SubmissionRefused(
            "unknown_provider",
            f"action {op.action!r}: unknown provider {op.provider!r}; known providers: "
            f"{', '.join(catalog.providers())}",
        )
    info = catalog.info(op.provider, op.operation)
    if info is None:
        raise SubmissionRefused(
            "unknown_operation",
            f"action {op.action!r}: provider {op.provider!r} has no operation "
            f"{op.operation!r}; its operations: {', '.join(catalog.operations(op.provider))} "
            "(GET /v1/catalog)",
        )
    return info


def _check_payload(op: OperationRequest, info: OperationInfo) -> None:
    problem = payload_problem(info, op.payload)
    if problem is not None:
        raise SubmissionRefused(
            "invalid_payload", f"action {op.action!r} ({op.operation}): {problem}"
        )


def _check_compensation(op: OperationRequest, catalog: Catalog, required: Collection[str]) -> None:
    """A compensation runs under its step's grant, with no person and with a payload recon
    derives (events.compensation), so the agent may only name the one its step's operation
    declares,
    without a payload of its own, and never one that needs a person's approval: nobody
    could approve it before the saga sends it."""
    compensation = op.compensation
    if compensation is None:
        return
    allowed = catalog.compensation_of(op.provider, op.operation)
    if compensation.operation != allowed:
        what = f"only {allowed!r}" if allowed else "none: leave the compensation out"
        raise SubmissionRefused(
            "compensation_not_allowed",
            f"action {op.action!r}: {compensation.operation!r} is not the compensation of "
            f"{op.operation!r}; the compensation it allows is {what}",
        )
    if compensation.payload is not None:
        raise SubmissionRefused(
            "compensation_payload_not_allowed",
            f"action {op.action!r}: a compensation's payload is derived from the step and "
            f'the evidence of its confirmation; send {{"operation": {allowed!r}}} alone',
        )
    if needs_approval(catalog.facts(op.provider, compensation.operation), required):
        raise SubmissionRefused(
            "approval_required_in_compensation",
            f"action {op.action!r}: its compensation {compensation.operation!r} needs a person's "
            "approval "
            "under this tenant's approval classes, and a compensation runs without one; "
            "make the step the last one, without a compensation",
        )


def _check_gated_notifications(
    submission: SubmissionRequest, catalog: Catalog, required: Collection[str]
) -> None:
    """A notification is sent by the decider on its own after commit, so nobody could
    approve it first: an operation that needs approval must be a step."""
    for kind, op in submission.operations():
        if kind is not OperationKind.STEP and needs_approval(
            catalog.facts(op.provider, op.operation), required
        ):
            raise SubmissionRefused(
                "approval_required_in_notification",
                f"{op.action!r} ({op.operation}) needs a person's approval, and "
                f"{kind.value} notifications run without one; make it a step",
            )


def _check_irreversible_steps(submission: SubmissionRequest) -> None:
    """A step without a compensation cannot be undone, so it may only be the last step:
    any step after it can still fail, and the transaction would then be left half done
    with no way back (docs/design.md, promise 5)."""
    for position, step in enumerate(submission.steps[:-1]):
        if step.compensation is None:
            later = ", ".join(repr(s.action) for s in submission.steps[position + 1 :])
            raise SubmissionRefused(
                "irreversible_step_not_last",
                f"step {step.action!r} ({step.operation}) has no compensation, so it cannot be "
                f"undone if a later step ({later}) fails; move it to on_commit, or after the "
                "last step that can fail, or give it a compensation",
            )


def operation_specs(
    submission: SubmissionRequest,
    *,
    tenant: str,
    environment: str,
    catalog: Catalog,
    approval_required: Collection[str] = DEFAULT_APPROVAL_REQUIRED,
) -> tuple[OperationSpec, ...]:
    return tuple(
        _spec(
            kind,
            op,
            catalog,
            op_key(
                tenant=tenant,
                environment=environment,
                provider=op.provider,
                tx_id=submission.tx_id,
                action=op.action,
            ),
            approval_required,
        )
        for kind, op in submission.operations()
    )


def _undo_template(catalog: Catalog, op: OperationRequest) -> dict[str, str] | None:
    """How the step's undo payload is built, as its provider declares it, recorded with
    the step so the decider builds it the same way on every replay."""
    info = catalog.info(op.provider, op.operation)
    if info is None or info.undo_payload is None:
        return None
    return dict(info.undo_payload)


def _spec(
    kind: OperationKind,
    op: OperationRequest,
    catalog: Catalog,
    key: str,
    approval_required: Collection[str],
) -> OperationSpec:
    compensation = op.compensation
    facts = catalog.facts(op.provider, op.operation)
    gated = kind is OperationKind.STEP and needs_approval(facts, approval_required)
    return OperationSpec(
        action=op.action,
        kind=kind,
        provider=op.provider,
        operation=op.operation,
        payload=op.provider_payload(),
        approval_required=gated,
        natural_key=op.natural_key,
        op_key=key,
        # What the provider declares today, recorded: the decider reads these from the
        # events for as long as the transaction lives, whatever the configuration becomes.
        facts=facts,
        compensation=(
            Compensation(
                operation=compensation.operation,
                payload=compensation.payload,
                facts=catalog.facts(op.provider, compensation.operation),
                template=_undo_template(catalog, op),
            )
            if compensation
            else None
        ),
        # The compensation's key is derived from the step's key alone: as stable as the effect.
        compensation_key=compensation_key(key) if compensation else None,
    )


def submit_command(
    submission: SubmissionRequest,
    *,
    tenant: str,
    fingerprint: str,
    operations: tuple[OperationSpec, ...],
    issued_at: datetime,
    lease_s: int | None = None,
    submitted_by: str | None = None,
) -> SubmitTransaction:
    return SubmitTransaction(
        # Deterministic: every resubmission of the same intent is recognisably the same
        # command, whatever the clock said.
        message_id=submit_id(tenant, submission.tx_id, fingerprint),
        tenant=tenant,
        tx_id=submission.tx_id,
        agent_id=submission.agent_id,
        fingerprint=fingerprint,
        operations=operations,
        issued_at=issued_at,
        session_id=submission.session_id or default_session(submission.agent_id),
        lease_s=lease_s,
        submitted_by=submitted_by,
    )
