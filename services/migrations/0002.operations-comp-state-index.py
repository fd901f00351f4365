"""Version 2: an index for the reconciler's in-flight compensation legs.

Every reconciler pass reads the legs in flight (reconcilers/store.py, `_CANDIDATES`):
forward legs through the index on `state`, compensation legs by `comp_state` with no index
at all, so each pass read the whole `operations` table. The index is partial (only rows with
a compensation key), so it stays small. Built concurrently (services/concurrent_index.py).
"""

from services import concurrent_index

__transactional__ = False  # CREATE INDEX CONCURRENTLY refuses to run inside a transaction

steps = concurrent_index.migration_steps(
    "operations_comp_state", "ON operations (comp_state) WHERE comp_op_key IS NOT NULL"
)
