"""Version 5: an index of the open reviews alone.

The reconciler's gauges (services/pull_reconciler/gauges.py) count the open reviews of every
tenant and take the oldest one's age every 15 s. `reviews` keeps every review ever opened
(a resolved one stays, with who resolved it and how) and its index leads with the tenant,
so a read of one state across tenants could not seek it: on the Postgres 15 of the
deployment image it read the whole table or index, growing with history; Postgres 18's
skip scan searches the index once per tenant. The index is partial (open reviews only), so
it stays as small as the queue. Built concurrently (services/concurrent_index.py).
"""

from services import concurrent_index

__transactional__ = False  # CREATE INDEX CONCURRENTLY refuses to run inside a transaction

steps = concurrent_index.migration_steps(
    "reviews_open", "ON reviews (created_at) WHERE state = 'open'"
)
