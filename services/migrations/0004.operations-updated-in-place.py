"""Version 4: a webhook's late evidence updates its operation's row in place.

The projector rewrites an operation's row at every event that moves it (projections.
writer), and a row whose indexed columns change is written as a new version with a new
entry in each of the table's five indexes. `operations_state` indexed `updated_at`, which
every event changes, so no update could stay in place (HOT), not even the commonest one
with the state unchanged: a provider's webhook for an effect already confirmed, evidence
only (about a third of the updates at c30). No reader needs `updated_at` from the index
(the in-flight legs are few: reconcilers/store.py, services/pull_reconciler/gauges.py,
the console's counts), so the index holds `state` alone. A row of about 1.6 KB can be
updated in place only if its page has room for the new version: the table's new pages are
filled to 70 % (`fillfactor`; pages written before keep theirs).

Measured (docs/benchmark.md, "The projector's update of operations").
"""

from typing import Any

from yoyo import step

from services import concurrent_index

__transactional__ = False  # CREATE INDEX CONCURRENTLY refuses to run inside a transaction


def apply(conn: Any) -> None:
    concurrent_index.build(conn, "operations_by_state", "ON operations (state)")
    concurrent_index.drop(conn, "operations_state")
    conn.cursor().execute("ALTER TABLE operations SET (fillfactor = 70)")


def rollback(conn: Any) -> None:
    conn.cursor().execute("ALTER TABLE operations RESET (fillfactor)")
    concurrent_index.build(conn, "operations_state", "ON operations (state, updated_at)")
    concurrent_index.drop(conn, "operations_by_state")


steps = [step(apply, rollback)]
