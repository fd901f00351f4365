"""When the projector and the saga orchestrator let records gather before their next fetch.

Every fetch that finds records costs a wake-up and, for the projector, a Postgres
transaction of half a dozen statements, however many records it brings. Idle or at a
trickle (a fetch of a few records: one decider transaction's events), a reader fetches
again at once, as before: latency first. After a large fetch there is a backlog, and
waiting `RECON_READER_BATCH_WAIT_MS` before the next fetch lets the next batch gather the
records of several decider transactions, paying those fixed costs once for all of them.
Why 50 ms, the bound: at concurrency 30 on the 2-core box (12-13 recon transactions/s,
a decider commit every ~50 ms) 20 ms gathered nothing measurable (1.23 -> 1.21 projector
batches per transaction) and 50 ms cut them to 1.00 (8.6 -> 7.0 Postgres statements per
transaction); at concurrency 1 no fetch is large and latency did not grow.
Only freshness under load moves (GET and the SDK's wait lag by up to the wait); exactly-once
and at-least-once do not, since what is read and committed is unchanged.

The saga orchestrator waits `RECON_SAGA_BATCH_WAIT_MS` (250 ms) instead: it reads every
event and acts on a failure's few alone (services.saga.reactor.REACTS_TO), so under load
its fetches were pure cost, 0.57 per transaction at concurrency 30, a quarter of the Fetch
requests recon's processes made, with the broker's work for each and a wake-up of the
saga; at 250 ms 0.11, and the saga's CPU 0.55 -> 0.15 ms per transaction
(docs/benchmark.md, "Kafka requests by client"). What waits is a compensation's next step
under load, by up to 250 ms more; no commit waits on the saga, and idle or at a trickle it
fetches again at once as before.
"""

# A fetch of at least this many records is a backlog. One decider transaction writes 2-5
# events at concurrency 1 (a decision's events, plus a webhook's evidence staged with it),
# so an idle system never reaches it.
LARGE_FETCH = 8


def wait_before_next_fetch(fetched: int, wait_s: float) -> float:
    """Seconds to wait before the next fetch, after a fetch of `fetched` records."""
    return wait_s if fetched >= LARGE_FETCH else 0.0
