"""Version 7: the indexes of an operation's compensation hold only the rows that have one.

Nearly every update of an operation's row changes its `state`, which `operations_by_state`
indexes, so it cannot be made in place (HOT): the new version gets an entry in every index
of the table whose predicate it meets. `operations_comp_op_key` indexed every row, those
with no compensation key under NULL, and `operations_comp_state` (version 2) every row with
a compensation key, its `comp_state` NULL until the compensation is dispatched, which
happens only for a transaction that fails after a step succeeded. Their readers all ask for
a key or a state, never for NULL (`comp_op_key = ...`, `comp_state = ANY(...)` with
`comp_op_key IS NOT NULL`: reconcilers/store.py, services/intake/webhook_store.py and
tenant_store.py, services/pull_reconciler/gauges.py, projections.operation_row.
either_leg_in), and a strict comparison implies its column is not NULL, so they read the
partial indexes as they read the whole ones, in this release and the one before.

Measured with services/devtools/projector_turns (docs/benchmark.md, "The projector's write
statement in Postgres"): the projector's statement per README transaction, ~268 shared
blocks and ~20.3 KB of WAL before. Built concurrently before the old ones are dropped, so a
reader always has an index (services/concurrent_index.py).
"""

from typing import Any

from yoyo import step

from services import concurrent_index

__transactional__ = False  # CREATE INDEX CONCURRENTLY refuses to run inside a transaction

# name: (the index now, the index it replaces, that one's definition)
_REPLACED = {
    "operations_comp_key_set": (
        "ON operations (comp_op_key) WHERE comp_op_key IS NOT NULL",
        "operations_comp_op_key",
        "ON operations (comp_op_key)",
    ),
    "operations_comp_dispatched": (
        "ON operations (comp_state) WHERE comp_op_key IS NOT NULL AND comp_state IS NOT NULL",
        "operations_comp_state",
        "ON operations (comp_state) WHERE comp_op_key IS NOT NULL",
    ),
}


def apply(conn: Any) -> None:
    for name, (definition, old, _) in _REPLACED.items():
        concurrent_index.build(conn, name, definition)
        concurrent_index.drop(conn, old)


def rollback(conn: Any) -> None:
    for name, (_, old, old_definition) in _REPLACED.items():
        concurrent_index.build(conn, old, old_definition)
        concurrent_index.drop(conn, name)


steps = [step(apply, rollback)]
