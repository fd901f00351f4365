"""Version 2: an index for the reconciler's in-flight compensation legs.

Every reconciler pass reads the legs in flight (reconcilers/store.py, `_CANDIDATES`):
forward legs through `operations_state`, compensation legs by `comp_state` with no index at
all, so each pass read the whole `operations` table. The index is partial (only rows with a
compensation key), so it stays small.

Built CONCURRENTLY, outside a transaction: a plain CREATE INDEX holds a ShareLock on
`operations` for the whole build, stopping every projector write on a large table.
An interrupted concurrent build leaves an INVALID index behind that `IF NOT EXISTS` would
take for done; it is dropped and built again.
"""

from typing import Any

from yoyo import step

__transactional__ = False  # CREATE INDEX CONCURRENTLY refuses to run inside a transaction

INDEX = "operations_comp_state"


def apply(conn: Any) -> None:
    cursor = conn.cursor()
    cursor.execute(
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE c.relname = %s AND pg_table_is_visible(c.oid)",
        (INDEX,),
    )
    row = cursor.fetchone()
    if row is not None and row[0]:
        return
    if row is not None:
        cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
    cursor.execute(
        f"CREATE INDEX CONCURRENTLY {INDEX} ON operations (comp_state)"
        " WHERE comp_op_key IS NOT NULL"
    )


def rollback(conn: Any) -> None:
    conn.cursor().execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")


steps = [step(apply, rollback)]
