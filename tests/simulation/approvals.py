"""Steps that wait for a person's approval (transactions.approvals, events.attempt_gate),
modelled in one schedule in four, drawn from their own generator so the others replay as
before.

At the door a step is marked `approval_required` by the intake's own rules
(`submission_gate.approval_classes`: the deployment's RECON_APPROVAL_REQUIRED, `destructive`,
and what the tenant's document adds, here `write` in half of these schedules, which gates
every charge; `needs_approval` over the step's class). The decider's real rules do the
rest: a gated step waits in `awaiting_approval`, an approval (with the preview it names:
`step_preview`, the intake's builder, over a provider that previews nothing) lets its
dispatch go and is spent by it, one given ahead may expire first (ApprovalExpired), a
rejection fails the transaction, compensating what ran, and a review `retry` of a gated
step needs a fresh approval (attempt_gate).

The operator, from what the projection shows: approves a step awaiting approval, or one
still pending ahead of it (now and then with an expiry of a few seconds), or rejects it and
never approves it again; before a `retry` of a gated step's review he approves it again,
except now and then when he forgets, and production refuses that retry (`attempt_refused`):
he looks again once his answer was decided and shown.

The promise, in the world's words (never the decider's state): no forward call of a gated
step is begun before the person approved it, and no two of its attempts on one approval:
the attempts begun never outnumber the approvals he gave. And he is never told that a step
his proposal showed gated needs no approval (`approval_not_required`, the API's code): an
approval that arrives after its transaction finished is answered as the live transaction
would have answered it (transactions.finished keeps the gate). A rejection's undo in reverse
order and nothing left in place are the existing checks.
"""

import random
from dataclasses import dataclass, field
from datetime import timedelta

from events.approval_inputs import ApproveOperation, RejectOperation
from events.approval_policy import DEFAULT_APPROVAL_REQUIRED, needs_approval
from events.definition import Leg, OperationKind, OperationSpec, OpStatus, Resolution, TxStatus
from events.envelope import Envelope
from events.inputs import DeciderInput, ResolveReview, SubmitTransaction
from events.legacy_facts import recorded_facts
from events.policy import PolicyDocument
from events.preview import preview_digest
from projections.view import OpView, TxView
from services.intake.step_preview import step_preview
from services.intake.submission_gate import approval_classes

from .clock import Clock
from .invariants import Violation

# Whom the operator key names: never the agent (separation of duties).
APPROVER = "operator"
# The classes a tenant's document may add at the door (events.policy.APPROVAL_CLASSES).
ADDED = ((), ("write",))
REJECT_SHARE = 0.2
# An approval that lapses in a few seconds, so one given ahead may expire before its step
# is reached; else the API's default of 900 s.
SHORT_EXPIRY_MS = (2_000, 8_000)
DEFAULT_EXPIRY_MS = 900_000
SHORT_SHARE = 0.3
# The share of gated reviews he first retries without approving again.
FORGET_SHARE = 0.5
# Approving a step still pending, ahead of the steps before it, against one awaiting.
AHEAD_WEIGHT = 0.3
DECIDE_WEIGHT = 2.0
# The API's code for an approval of a step that needs none (docs/contract.md).
NOT_REQUIRED = "approval_not_required"


@dataclass
class SimApprovals:
    clock: Clock
    rng: random.Random
    # The classes that need approval, or None: not modelled in this schedule.
    classes: frozenset[str] | None = None
    # Per gated step's key: the approvals he gave (their expiry in ms), in order.
    given: dict[str, list[int]] = field(default_factory=dict)
    rejected: set[str] = field(default_factory=set)
    # The reviews of gated steps he answered `retry`: how many times (he looks again at
    # one still open once his answer was decided and shown).
    answers: dict[str, int] = field(default_factory=dict)
    # Per gated step's key, after such a retry and until he approves it again: the attempt
    # that was under review.
    barred: dict[str, int] = field(default_factory=dict)
    # Per transaction: its fingerprint (the proposal's digest) and its steps as recorded.
    proposals: dict[str, tuple[str, tuple[OperationSpec, ...]]] = field(default_factory=dict)

    @classmethod
    def drawn(cls, clock: Clock, seed: int) -> "SimApprovals":
        rng = random.Random(f"approvals:{seed}")
        model = cls(clock, rng)
        if rng.random() < 1 / 4:
            document = PolicyDocument(version=1, approval_required=rng.choice(ADDED))
            model.classes = approval_classes(document, DEFAULT_APPROVAL_REQUIRED)
        return model

    def submitted(self, tx: SubmitTransaction) -> SubmitTransaction:
        """The submission as the intake records it: each step that needs approval marked
        (services.intake.submission._spec)."""
        if self.classes is None:
            return tx
        classes = self.classes
        operations = tuple(
            spec.model_copy(update={"approval_required": True})
            if spec.kind is OperationKind.STEP
            and needs_approval(recorded_facts(spec.facts, spec.operation), classes)
            else spec
            for spec in tx.operations
        )
        steps = tuple(s for s in operations if s.kind is OperationKind.STEP)
        self.proposals[tx.tx_id] = (tx.fingerprint, steps)
        for spec in steps:
            if spec.approval_required:
                self.given.setdefault(spec.op_key, [])
        return tx.model_copy(update={"operations": operations})

    # --- the operator --------------------------------------------------------------

    def choices(self, view: TxView) -> list[tuple[str, float, OpView]]:
        """(what, weight, step) the operator may do now for this transaction's gated steps:
        decide a step awaiting approval, or approve one ahead while the transaction runs."""
        if self.classes is None or view.status not in (
            TxStatus.ACCEPTED,
            TxStatus.RUNNING,
            TxStatus.AWAITING_APPROVAL,
        ):
            return []
        found = []
        for op in view.operations:
            key = op.op_key
            if op.kind is not OperationKind.STEP or key in self.rejected or key not in self.given:
                continue
            if self._live(key):
                continue  # his approval is on its way
            if op.state is OpStatus.AWAITING_APPROVAL:
                found.append(("approve_or_reject", DECIDE_WEIGHT, op))
            elif op.state is OpStatus.PENDING and not op.attempts:
                found.append(("approve_ahead", AHEAD_WEIGHT, op))
        return found

    def _live(self, key: str) -> bool:
        given = self.given[key]
        return bool(given) and given[-1] > self.clock.now

    def decide(self, view: TxView, op: OpView) -> ApproveOperation | RejectOperation:
        """His answer to a step awaiting approval: an approval, or now and then a rejection
        (never approved again). One still pending he only approves ahead: a rejection of a
        step with no approval to revoke is ignored (approvals.reject)."""
        if op.state is OpStatus.AWAITING_APPROVAL and self.rng.random() < REJECT_SHARE:
            self.rejected.add(op.op_key)
            return RejectOperation(
                message_id=f"reject:{op.op_key}",
                tenant=view.tenant,
                tx_id=view.tx_id,
                action=op.action,
                reason="rejected",
                actor=APPROVER,
                note="not this one",
                issued_at=self.clock.at(),
            )
        return self.approve(view, op)

    def approve(self, view: TxView, op: OpView) -> ApproveOperation:
        """An approval of the latest preview (services.intake.approvals' command), which
        shows every step of the proposal as the provider previews it now."""
        fingerprint, steps = self.proposals[view.tx_id]
        shown = tuple(step_preview(spec, 200, {}) for spec in steps)
        expiry = (
            self.rng.choice(SHORT_EXPIRY_MS)
            if self.rng.random() < SHORT_SHARE
            else DEFAULT_EXPIRY_MS
        )
        given = self.given[op.op_key]
        given.append(self.clock.now + expiry)
        self.barred.pop(op.op_key, None)
        return ApproveOperation(
            message_id=f"approve:{op.op_key}:{len(given)}",
            tenant=view.tenant,
            tx_id=view.tx_id,
            action=op.action,
            approval_id=f"ap_{op.op_key}_{len(given)}",
            proposal_digest=fingerprint,
            preview_digest=preview_digest(view.tx_id, fingerprint, shown),
            approver=APPROVER,
            expires_at=self.clock.at() + timedelta(milliseconds=expiry),
            issued_at=self.clock.at(),
            shown=shown,
        )

    def resolving(self, view: TxView, command: ResolveReview) -> list[DeciderInput]:
        """What he sends to resolve a review: a `retry` of a gated step comes after a fresh
        approval, except, now and then, the first time (he forgot: production refuses the
        retry). Such a review he looks at again while it is open (`answers`): production
        also refuses an approval, and so the retry, of a transaction being aborted."""
        review = next(r for r in view.reviews if r.review_id == command.review_id)
        key = review.op_key
        if (
            command.resolution is not Resolution.RETRY
            or review.leg is not Leg.FORWARD
            or key not in self.given
        ):
            return [command]
        answers = self.answers[review.review_id] = self.answers.get(review.review_id, 0) + 1
        again = command.model_copy(update={"message_id": f"{command.message_id}:{answers}"})
        if answers == 1 and self.rng.random() < FORGET_SHARE:
            self.barred[key] = review.attempt
            return [again]
        op = next(o for o in view.operations if o.op_key == key)
        return [self.approve(view, op), again]

    # --- the check ---------------------------------------------------------------------

    def on_event(self, envelope: Envelope) -> None:
        """The answer to an approval he gave: a step the proposal showed him gated is never
        said to need none. Seen at seed 59 when a finished transaction's marker forgot the
        gate: his approval, sent while the transaction ran, was decided after it finished."""
        if envelope.type != "ApprovalRefused" or envelope.data["reason"] != NOT_REQUIRED:
            return
        _, steps = self.proposals.get(envelope.tx_id, ("", ()))
        action = envelope.data["action"]
        if any(s.action == action and s.approval_required for s in steps):
            raise Violation(
                f"{envelope.tx_id} {action}: an approval of a step the proposal showed gated "
                f"was answered {NOT_REQUIRED}"
            )

    def on_begun(self, key: str, leg: Leg, attempt: int) -> None:
        """A call begun: a gated step's forward call is begun only once the person approved
        it, and a `retry` he sent without approving it again starts nothing: no attempt
        past the one under review is begun before he does. (The machine's own resend of
        an approved step whose answer was lost, looked up first under the same key, is a
        new attempt of the one approved call: not his to approve again.)"""
        if leg is not Leg.FORWARD or key not in self.given:
            return
        if not self.given[key]:
            rejected = " (he rejected it)" if key in self.rejected else ""
            raise Violation(
                f"{key}: attempt {attempt} of a step that needs approval begun before the "
                f"person approved it{rejected}"
            )
        under_review = self.barred.get(key)
        if under_review is not None and attempt > under_review:
            raise Violation(
                f"{key}: attempt {attempt} begun after a retry of attempt {under_review} the "
                "person sent without approving the step again"
            )
