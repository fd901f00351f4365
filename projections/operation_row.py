"""An operation's view (projections.view.OpView) as a row of the `operations` table, and
back: the one place that knows how its legs are stored.

The view holds the decider's two legs (events.legs.LegState); the table keeps them in
columns other processes query with SQL: `state` is the operation's status in the API's
vocabulary (events.legs.op_status), `attempts` the forward leg's attempt, and the
compensation leg sits in `comp_op_key`, `comp_state` and `comp_attempts`. Those three
keep their storage names: renaming a column is a migration (services/migrations) that
every reader and writer must follow in the same release; every Python name says
`compensation`.

Pure: no I/O. The writer loads a transaction's rows once per batch and writes its changed
rows once; the events in between move the legs themselves, never these columns.
"""

import json
from collections.abc import Mapping
from typing import Any

from events.definition import OperationKind
from events.legs import LegState, LegStatus
from projections.table_writes import jsonb_text
from projections.view import OpView


def either_leg_in(state: str, alias: str = "") -> str:
    """SQL: the row's forward leg or its compensation is in `state` (an SQL expression: a
    parameter or a literal), for the readers of the few legs in flight. The compensation's
    branch carries the predicate of its partial index (`operations_comp_dispatched`, services/
    migrations), so Postgres can read both legs by index; without it the OR reads the whole
    table (a compensation state is set only with its key, so no row is left out)."""
    at = f"{alias}." if alias else ""
    return f"({at}state = {state} OR ({at}comp_state = {state} AND {at}comp_op_key IS NOT NULL))"


def operation_row(tenant: str, tx_id: str, op: OpView) -> tuple[Any, ...]:
    """The row in the column order of projections.table_writes' `operations`."""
    compensation = op.compensation
    return (
        tenant,
        tx_id,
        op.action,
        op.position,
        op.kind.value,
        op.provider,
        op.operation,
        op.op_key,
        op.state.value,
        op.forward.attempt,
        op.remote_id,
        jsonb_text(op.evidence),
        op.updated_at,
        op.compensation_key,
        compensation.status.value if compensation else None,
        compensation.attempt if compensation else 0,
        op.open_review_id,
    )


def legs_of(row: Mapping[str, Any]) -> tuple[LegState, LegState | None]:
    """The forward leg and the compensation (None before its first dispatch) a row holds,
    from its `state`, `attempts`, `comp_state`, `comp_attempts` and `open_review_id`."""
    review = row["open_review_id"]
    if row["comp_state"] is None:
        forward = LegState(status=LegStatus(row["state"]), attempt=row["attempts"], review=review)
        return forward, None
    # A compensation is dispatched only for a confirmed forward leg, whose review (if it
    # had one) was resolved first: the `state` column then shows the compensation's
    # progress, and the one open review is the compensation's.
    forward = LegState(status=LegStatus.CONFIRMED, attempt=row["attempts"])
    compensation = LegState(
        status=LegStatus(row["comp_state"]), attempt=row["comp_attempts"], review=review
    )
    return forward, compensation


def operation_view(row: Mapping[str, Any]) -> OpView:
    """The view a row was written from."""
    forward, compensation = legs_of(row)
    return OpView(
        action=row["action"],
        position=row["position"],
        kind=OperationKind(row["kind"]),
        provider=row["provider"],
        operation=row["operation"],
        op_key=row["op_key"],
        compensation_key=row["comp_op_key"],
        forward=forward,
        compensation=compensation,
        remote_id=row["remote_id"],
        evidence=tuple(json.loads(row["evidence"])),
        updated_at=row["updated_at"],
    )
