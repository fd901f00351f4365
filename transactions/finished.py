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
the same `handle`: the status, plan and abort flag (commands), each operation's keys,
legs (status, attempt) (late observations are recorded as ObservationIgnored on the chain),
and the chain's seq and last hash. What it drops, and what that changes:
- payloads: a finished transaction never dispatches, so they are never read again;
- `seen` (input ids): a re-delivered input is judged again instead of being recognised;
  on a finished transaction that can only record one more CommandIgnored or
  ObservationIgnored, never an effect.
"""

from typing import Any, Literal

from pydantic import model_validator

from events.definition import FINISHED, OperationKind, TxStatus
from events.legs import LegState, upcast_legs
from events.model import Message
from transactions.state import TransactionState

# How a marker's serialisation begins (`kind` is its first field; a full TransactionState
# has none): a restore recognises markers by it without parsing them.
MARKER_PREFIX = b'{"kind":"finished"'


class FinishedOperation(Message):
    action: str
    kind: OperationKind
    op_key: str
    compensation_key: str | None = None
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
            "tenant": state.tenant,
            "tx_id": state.tx_id,
            "status": state.status,
            "fingerprint": state.fingerprint,
            "aborting": state.aborting,
            "plan": state.plan,
            "seq": state.seq,
            "last_hash": state.last_hash,
            "operations": [
                {
                    "action": op.spec.action,
                    "kind": op.spec.kind,
                    "op_key": op.spec.op_key,
                    "compensation_key": op.spec.compensation_key,
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
            "tenant": marker.tenant,
            "tx_id": marker.tx_id,
            "status": marker.status,
            "fingerprint": marker.fingerprint,
            "aborting": marker.aborting,
            "plan": marker.plan,
            "seq": marker.seq,
            "last_hash": marker.last_hash,
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
                    },
                    "forward": op.forward,
                    "compensation": op.compensation,
                }
                for op in marker.operations
            ],
        }
    )
