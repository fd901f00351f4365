"""What the decider keeps of a transaction that has finished: a compact marker.

Pure: no I/O, no clock.

A finished transaction (committed, failed or compensated, nothing in flight, no review
open) can never dispatch again, whatever arrives. Its full state (payloads, every input
id seen) is only weight: it made the changelog, the restore time and the memory grow with
history. The decider therefore replaces it, under the same changelog key, by this marker.
Compaction then drops the full state, so a restore reads one small record per finished
transaction and a full one per live transaction.

The marker is not a tombstone on purpose: without it, a duplicate SubmitTransaction of a
finished transaction (a direct duplicate on recon.commands, a replay) would look new and
run the transaction, and its effects, a second time (promise 1). Provider idempotency
under the same op key is not a guard to rely on: provider keys expire.

It keeps just enough to answer every late input exactly as the full state did, through
the same `handle`: the fields named in KEPT, which are the state's own, under its names, and
each operation's keys, gate and legs. What a late input's judgement reads of them, by kind:
- a resubmission, the fingerprint (a retry, or operations_immutable);
- an observation, each operation's keys and legs (status, attempt): recorded as
  ObservationIgnored on the chain, whose seq and last hash the marker keeps;
- the saga's plan and compensate, the plan and the legs;
- an approval, the step's kind and `approval_required`, the approvals given (their ids,
  and which are spent), the submitting agent and principal (separation of duties), then
  the status; a rejection, nothing past the status;
- an agent's abort, release or review request, the owner (the fence; the owner's release
  is still recorded); an abort, the status and abort flag;
- a session's command, the count of session-caused events (the cap) and the refusals
  already recorded (the same refusal again records nothing); a claim, the status;
- a review's resolution, the legs' open reviews (none: a finished transaction has none).
What it drops, and what that changes:
- payloads, providers, operations, facts, remote ids, pinned revisions: read only to
  dispatch (and an approval's preview check, reached only while the transaction is open),
  and a finished transaction never dispatches;
- `seen` (input ids): a re-delivered input is judged again instead of being recognised;
  on a finished transaction that can only record one more refusal or ignored input
  (CommandIgnored, CommandRefused, ApprovalRefused, ObservationIgnored), never an effect.
Markers written before the approvals, owner and input bounds were kept have none: late
inputs are judged on them as before, without a fence or a gate (the recorded reason
may differ; nothing is dispatched either way).
"""

from typing import Any, Final, Literal

from pydantic import Field, model_validator

from events.approval_ledger import Approval
from events.definition import FINISHED, OperationKind, TxStatus
from events.legs import LegState, upcast_legs
from events.model import Message, absent, falsy
from transactions.input_bounds import RefusalKey
from transactions.ownership import Owner
from transactions.state import TransactionState

# How a marker's serialisation begins (`kind` is its first field; a full TransactionState
# has none): a restore recognises markers by it without parsing them.
MARKER_PREFIX = b'{"kind":"finished"'


class FinishedOperation(Message):
    action: str
    kind: OperationKind
    op_key: str
    compensation_key: str | None = None
    # Left out when false, as in the spec: a marker without a gate is as before.
    approval_required: bool = Field(default=False, exclude_if=falsy)
    forward: LegState
    compensation: LegState | None = None

    @model_validator(mode="before")
    @classmethod
    def _upcast(cls, data: Any) -> Any:
        # Markers written by earlier versions (flat legs, or an `undo` leg), like the states.
        return upcast_legs(data)


class FinishedTransaction(Message):
    # Tells a marker from a full TransactionState on the changelog.
    kind: Literal["finished"] = "finished"
    tenant: str
    tx_id: str
    status: TxStatus
    fingerprint: str
    aborting: bool = False
    plan: tuple[str, ...] = ()
    seq: int
    last_hash: str
    operations: tuple[FinishedOperation, ...] = ()
    # What late approvals and agents' commands are judged by (see the module's list). Left
    # out when empty, so a marker of a transaction without them is as long as before.
    agent_id: str = Field(default="", exclude_if=falsy)
    submitted_by: str | None = Field(default=None, exclude_if=absent)
    owner: Owner | None = Field(default=None, exclude_if=absent)
    approvals: tuple[Approval, ...] = Field(default=(), exclude_if=falsy)
    session_events: int = Field(default=0, exclude_if=falsy)
    refused: tuple[RefusalKey, ...] = Field(default=(), exclude_if=falsy)


# The fields of the state a marker keeps as they are, under the same names: `finish` and
# `revive` copy these, so a field a late input's judgement reads is named once, here.
KEPT: Final = (
    "tenant",
    "tx_id",
    "status",
    "fingerprint",
    "aborting",
    "plan",
    "seq",
    "last_hash",
    "agent_id",
    "submitted_by",
    "owner",
    "approvals",
    "session_events",
    "refused",
)


def is_finished(state: TransactionState) -> bool:
    """Nothing can move this transaction any more. Stricter than `is_terminal`: a
    transaction in manual review, or with a review open on a notification, still waits
    for a person's ResolveReview, which needs the full state."""
    return (
        state.status in FINISHED
        and not any(leg.in_flight for op in state.operations for _, leg in op.legs())
        and not any(op.open_review is not None for op in state.operations)
    )


def keep(state: TransactionState) -> "TransactionState | FinishedTransaction":
    """What the decider keeps of a transaction after an input: its marker once it is
    finished, else its full state. `is_finished` judged once: `finish`'s own check would
    judge it a second time (1.7 us a README state, at each input that leaves a transaction
    finished: its last and every late one)."""
    return _marker(state) if is_finished(state) else state


def finish(state: TransactionState) -> FinishedTransaction:
    assert state.status is not None and is_finished(state), state.status
    return _marker(state)


def _marker(state: TransactionState) -> FinishedTransaction:
    # One validation of the whole marker, its operations as dicts: `Model(**fields)` is that
    # same validation of a dict, so each nested model comes out as a constructor call would
    # make it (its before-validators included), without a Python call per operation. The
    # decider finishes a state at every input of a finished transaction (late webhooks):
    # 9.1-9.5 -> 5.6 us a README marker (tests/unit/test_decider_finished.py compares
    # both ways; docs/benchmark.md).
    return FinishedTransaction.model_validate(
        {
            **{name: getattr(state, name) for name in KEPT},
            "operations": [
                {
                    "action": op.spec.action,
                    "kind": op.spec.kind,
                    "op_key": op.spec.op_key,
                    "compensation_key": op.spec.compensation_key,
                    "approval_required": op.spec.approval_required,
                    "forward": op.forward,
                    "compensation": op.compensation,
                }
                for op in state.operations
            ],
        }
    )


def revive(marker: FinishedTransaction) -> TransactionState:
    """A state `handle` judges late inputs against as it judged them before the
    transaction finished. The specs lose their payloads and provider details: nothing on
    a finished transaction dispatches, so nothing reads them. One validation, as `finish`."""
    return TransactionState.model_validate(
        {
            **{name: getattr(marker, name) for name in KEPT},
            "operations": [
                {
                    "spec": {
                        "action": op.action,
                        "kind": op.kind,
                        "provider": "",
                        "operation": "",
                        "payload": {},
                        "op_key": op.op_key,
                        "compensation": {"operation": ""} if op.compensation_key else None,
                        "compensation_key": op.compensation_key,
                        "approval_required": op.approval_required,
                    },
                    "forward": op.forward,
                    "compensation": op.compensation,
                }
                for op in marker.operations
            ],
        }
    )
