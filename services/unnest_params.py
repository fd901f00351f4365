"""`unnest` of array parameters in a shape Postgres plans once per connection.

asyncpg prepares every statement, and Postgres plans a prepared statement's first five
executions with the parameters' values (custom plans), then keeps its generic plan only if
that one is costed no higher than the custom plans were on average. A parameter array given
to `unnest` spoils the comparison: a custom plan folds the array in and counts its elements
(a webhook's one delivery, a submission's one mark), the generic plan guesses 10 rows, so
every join under the unnest is costed about ten times higher, the generic plan never wins
and the statement is planned again at every call. Under load that planning was more server
CPU than the execution (the intake's webhook batch statement 0.79 ms of planning and 0.35 of
execution per transaction at c30, docs/benchmark.md).

Each array read through a scalar subquery (`(SELECT $1::text[])`, an InitPlan run once per
execution) is a value neither plan can count, so both guess alike, the generic plan costs
what the custom ones did and is kept from the sixth execution on. Its row guess (10) is
what the statements' joins are written for anyway: a primary-key or index probe per
element, whatever the batch's size (tests/integration/test_unnest_plans.py).

The generic plan is kept only while it costs no more than the custom plans' average, and
that average is of the first five, made on the tables as they were then: a process that
started on near-empty tables (the benchmark's warm-up) re-costs its generic plan after an
ANALYZE on grown tables and plans at every call again, as the webhook statement still does
in `bench -c 30` (docs/benchmark.md). The gate's begin (services.dispatcher.calls_begun)
runs on a pool that plans generically instead (`open_begin_pool`), as the intake's webhook
checks do (services.intake.delivery_batches).
"""


def unnest_params(*arrays: str) -> str:
    """`unnest(...)` of the typed parameters `arrays` (e.g. `"$1::text[]"`), each read
    through a scalar subquery."""
    return "unnest(" + ", ".join(f"(SELECT {array})" for array in arrays) + ")"
