"""What one projected event moved: the statuses a transaction and its operations entered,
and the reviews it opened, read off the view before and after the event (projections.view),
so the metrics count exactly the transitions the API shows, by the decider's own rules
(events.legs) and not by a second table of which event means what.

Pure: no I/O, no clock.
"""

from collections import Counter
from dataclasses import dataclass, field

from events.definition import OpStatus, TxStatus
from projections.view import TxView


@dataclass
class Moves:
    """Counts over a batch: status -> how many transactions (operations) entered it."""

    transactions: Counter[TxStatus] = field(default_factory=Counter)
    operations: Counter[OpStatus] = field(default_factory=Counter)
    reviews_opened: int = 0
    # For each transaction that entered `committed`: seconds from its acceptance, by the
    # events' own times.
    committed_after_s: list[float] = field(default_factory=list)

    def add(self, before: TxView | None, after: TxView) -> None:
        if before is after:
            return  # a re-applied envelope, or an event that moved nothing
        if before is None or before.status is not after.status:
            self.transactions[after.status] += 1
            if after.status is TxStatus.COMMITTED:
                self.committed_after_s.append((after.updated_at - after.created_at).total_seconds())
        if before is None:
            for op in after.operations:
                self.operations[op.state] += 1
        else:
            # The fold copies only the operation an event moves (projections.view) and the
            # operations keep their order: an untouched one is the very object it was, so
            # only the copies have their status derived (op_status), twice each.
            for op, was in zip(after.operations, before.operations, strict=True):
                if op is not was and (state := op.state) is not was.state:
                    self.operations[state] += 1
        self.reviews_opened += len(after.reviews) - (0 if before is None else len(before.reviews))
