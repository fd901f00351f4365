"""Version 15: the approvals and refusals on the log, indexed by tenant and approval id.

An operator refuses a step by the approval id he was given (POST /v1/approvals/{key}/reject
names an op key or an `ap_...` id): the intake finds the step from the OperationApproved or
ApprovalRefused the decider recorded (services.intake.tenant_store.APPROVED_STEP). The
only index of `events` that query could use was its primary key (tenant, tx_id, seq), so it
read every event the tenant ever had, and a refusal's cost grew with the tenant's history
(docs/benchmark.md, "A step found by its approval id"). This index holds those two types'
rows alone, so it stays as small as the approvals, and the projector's other events cost
it nothing to write. Its expression and predicate are the query's, word for word.

Built concurrently (services/concurrent_index.py): the projector goes on writing events
while it is built. A crash or a cut connection mid-build leaves an INVALID index named
events_approval_id, which no query reads (the lookup reads the whole history meanwhile, as
before: correct, at the old cost) and which writes of approvals still maintain; this
migration is not marked applied (a migration outside a transaction is marked after it), so
the next `migrate` runs it again, and `concurrent_index.build` drops the invalid index and
builds it anew. A crash after the build but before the mark: the next run finds the index
valid and marks it.
"""

from services import concurrent_index

__transactional__ = False  # CREATE INDEX CONCURRENTLY refuses to run inside a transaction

steps = concurrent_index.migration_steps(
    "events_approval_id",
    "ON events (tenant, (data->>'approval_id'))"
    " WHERE type IN ('OperationApproved', 'ApprovalRefused')",
)
