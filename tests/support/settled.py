"""When a test may take a transaction, as `GET /v1/transactions/{tx_id}` shows it, for over:
recon will do nothing more for it on its own. What a test counts afterwards (effects and
calls at the provider, receipts sent, rows) is then final, whatever the timing.

Three things must hold, and the status alone says only the first:
- the status is an end, or a person's turn (`manual_review`: nothing moves until they act);
- no call is in flight: no leg dispatched or unknown, forward (`dispatched`, `unknown`) or
  undo (`compensating`), in the API's names of events.legs' in-flight legs;
- no notification the status releases is still `pending`. The decider dispatches every
  `on_commit` notification in the decision that commits (transactions.transaction,
  `_advance`), and every `on_compensated` one with the compensation's end, so on the log a
  committed transaction never has one pending. The projection can: the projector writes a
  batch per database transaction, and a batch ends where its fetch ends (1000 records, or
  the bytes of a fetch), which may fall between TransactionCommitted and the receipt's
  OperationDispatched of the same Kafka transaction; after a large batch the projector
  waits RECON_READER_BATCH_WAIT_MS (50 ms) before the next. A wait that took "committed,
  nothing dispatched" then returned before the receipt was even sent.

A notification of the other kind stays `pending` for good (a compensated transaction's
`on_commit`), as do the steps after a failed one: neither holds the wait.
"""

from collections.abc import Collection
from typing import Any

from events.definition import OperationKind, TxStatus
from events.legs import IN_FLIGHT, LegState, op_status

TERMINAL: frozenset[str] = frozenset(
    {TxStatus.COMMITTED, TxStatus.FAILED, TxStatus.COMPENSATED, TxStatus.MANUAL_REVIEW}
)

# The operation states that show a leg in flight: its forward call, or its undo's.
IN_FLIGHT_STATES: frozenset[str] = frozenset(
    {op_status(LegState(status=s), None) for s in IN_FLIGHT}
    | {op_status(LegState(), LegState(status=s)) for s in IN_FLIGHT}
)

# The notifications a status sends out (transactions.transaction, `_notify`).
RELEASES: dict[str, OperationKind] = {
    TxStatus.COMMITTED: OperationKind.ON_COMMIT,
    TxStatus.COMPENSATED: OperationKind.ON_COMPENSATED,
}


def settled(tx: dict[str, Any], statuses: Collection[str] = TERMINAL) -> bool:
    """`tx` has reached one of `statuses`, and nothing of it is in flight or still to be
    sent on its own (above)."""
    if tx["status"] not in statuses:
        return False
    released = RELEASES.get(tx["status"])
    return not any(
        o["state"] in IN_FLIGHT_STATES or (o["kind"] == released and o["state"] == "pending")
        for o in tx["operations"]
    )
