"""A transaction's state as the decider holds it: its operations (each with its two legs),
owner, approvals and the bounded record of its inputs. The values `decide` reads and
`evolve` writes (transactions.transaction), and the approval gate reads
(transactions.approvals), kept apart so that neither imports the other.

Pure: no I/O, no clock.
"""

from typing import Any

from pydantic import field_validator, model_validator

from events.approval_ledger import Approval
from events.definition import Leg, OperationKind, OperationSpec, OpStatus, TxStatus
from events.envelope import GENESIS_HASH
from events.legs import LegState, LegStatus, op_status, upcast_legs
from events.model import Message
from transactions.input_bounds import SEEN_WINDOW, RefusalKey
from transactions.ownership import Owner


class OperationState(Message):
    spec: OperationSpec
    forward: LegState = LegState()
    compensation: LegState | None = None
    remote_id: str | None = None
    # The revision recon pinned on the forward leg's first attempt, sent by every later
    # one (transactions.revisions).
    pinned_revision: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _upcast(cls, data: Any) -> Any:
        # Changelog records written before the legs were values are read on restore.
        return upcast_legs(data)

    @property
    def status(self) -> OpStatus:
        """The operation's status in the API's vocabulary."""
        return op_status(self.forward, self.compensation)

    @property
    def open_review(self) -> str | None:
        return self.forward.review or (self.compensation.review if self.compensation else None)

    def legs(self) -> list[tuple[Leg, LegState]]:
        return [(Leg.FORWARD, self.forward)] + (
            [(Leg.COMPENSATION, self.compensation)] if self.compensation else []
        )

    def leg_of(self, key: str) -> Leg | None:
        if key == self.spec.op_key:
            return Leg.FORWARD
        if key == self.spec.compensation_key:
            return Leg.COMPENSATION
        return None

    def leg(self, which: Leg) -> LegState | None:
        """None: the compensation, not dispatched yet."""
        return self.forward if which is Leg.FORWARD else self.compensation


class TransactionState(Message):
    tenant: str
    tx_id: str
    status: TxStatus | None = None  # None: nothing accepted under this tx_id yet
    agent_id: str = ""
    submitted_by: str | None = None  # the submitting key's principal (TransactionAccepted)
    fingerprint: str = ""
    operations: tuple[OperationState, ...] = ()
    aborting: bool = False
    plan: tuple[str, ...] = ()  # compensations, in the order they run
    owner: Owner | None = None  # the session that owns it (transactions.ownership)
    approvals: tuple[Approval, ...] = ()  # transactions.approvals
    # Chain bookkeeping, advanced by `record` from the envelopes.
    seq: int = 0
    last_hash: str = GENESIS_HASH
    # The latest input ids only, a count of session-caused events and the refusals of
    # sessions' commands already recorded: all bounded (transactions.input_bounds), or
    # an agent key could grow the state without end.
    seen: tuple[str, ...] = ()
    session_events: int = 0
    refused: tuple[RefusalKey, ...] = ()

    @field_validator("seen", mode="before")
    @classmethod
    def _window(cls, value: Any) -> Any:
        # Changelog records written before the window kept every id (a JSON list).
        return tuple(value)[-SEEN_WINDOW:] if isinstance(value, (list, tuple, set)) else value

    def operation(self, action: str) -> OperationState | None:
        return next((op for op in self.operations if op.spec.action == action), None)

    def of_kind(self, kind: OperationKind) -> list[OperationState]:
        return [op for op in self.operations if op.spec.kind is kind]

    def steps(self) -> list[OperationState]:
        return self.of_kind(OperationKind.STEP)

    def all_compensated(self, actions: tuple[str, ...]) -> bool:
        """Whether the compensation of every one of these operations is proven done."""
        return all(
            op.compensation is not None and op.compensation.status is LegStatus.CONFIRMED
            for op in self.operations
            if op.spec.action in actions
        )
