"""Which decisions may wait for the partition's next Kafka transaction, and for how long.

Each decider Kafka transaction costs broker requests (AddPartitionsToTxn, Produce, EndTxn,
the broker's markers) whatever it carries. A decision that only records evidence moves
nothing anyone waits for: a webhook for an effect the provider's answer already confirmed,
a duplicate command, an observation of a leg no longer in flight. Nor does a notification's
confirmation (`nobody_waits`): a notification is dispatched once the transaction's outcome
is decided, and nothing is dispatched or decided after it succeeded. Such inputs are decided
at once (the partition's later inputs see their state) but their records and offsets stay
staged in memory, and commit with the partition's next decision that matters, or once they
have waited `interval`: `RECON_DECIDER_GROUP_COMMIT_MS` (100) when the decider is idle,
longer in proportion to the records its last fetch brought per partition (a backlog: other
inputs will soon come to carry them), up to `MAX_STRETCH` times as long, and that long
while a provider call of the partition is in flight (its answer will carry them) or when
they only add to transactions already finished (`interval`'s `only_finished`).

Why the longest for a finished transaction's evidence: a real provider's delivery queue
sends its webhooks seconds after the effects (docs/benchmark.md "Webhooks that come
late"), so at low concurrency they reach a partition whose transaction has ended and whose
next is a while off; each then committed alone once the idle interval passed (T 3.65-3.75
-> 3.96-4.33 decider transactions per README transaction at concurrency 1 with webhooks 2 s
late). Nothing reads that evidence to move a leg, and the transaction's status is final.

Why 100 ms and not a few: at concurrency 1 a webhook for an effect the answer confirmed
reaches the decider tens of milliseconds before the transaction's next decision (the next
step's answer), so a few milliseconds caught none of them (T 6.7 -> 6.6 decider transactions
per README transaction with 5 ms, 4.7 with 100 ms). Nobody waits for these events: a
leg, a status or a plan never moves by them, so the wait is on nobody's path. And a
transaction committed right after the producer's previous one is refused with
CONCURRENT_TRANSACTIONS until the broker has written the previous one's markers, and aiokafka
retries it 20 ms later: a staged webhook committed alone just before the next step's answer
put that back-off on the critical path (1.7 per transaction at c1 with 5 ms, 0.03 with 100).

A decision that matters (urgent) opens its partition's next transaction at once, with
whatever is staged, unless that partition's last transaction ended less than SPACING times
its own duration ago (that spacing at most MAX_STRETCH idle intervals, and idle, without a
backlog and after a quick transaction or with no other partition's decision that matters
staged or on the wire nor call in flight, or no other live transaction on the partition, at
most IDLE_SPACING_S, the broker's time to write the last one's markers: `spacing_bound`):
then it waits for that, and what arrives meanwhile goes with it (`next_start`; due evidence
likewise).
Decisions made while the partition's transaction is on the wire are staged for the next
one in any case (services.decider.runtime). So a busy partition's transactions are spaced
by about twice their own duration, which grows with the broker's load, and each carries what
arrived in between; an idle one commits at once, or once the broker has written the last
one's markers. The spacing keeps a transaction from following the previous one before then
(CONCURRENT_TRANSACTIONS above).

Exactly-once is unchanged: a staged input's offset is committed only in the transaction
that carries its records. A crash or a fence forgets the staged decisions with the rest of
the partition's memory; the inputs are read again from the committed offsets and decided
again, to the same records (a decision is pure). A revocation commits them first
(Decider.hand_over): an answer of the process's own call decided inline is in no topic,
and forgotten it would cost the next owner a lookup. So one whose provider cannot be asked
(lookup strategy `none`: a person would settle it) is never staged (dispatch_host.Answer).
"""

from collections.abc import Sequence

from events.definition import OperationKind
from events.transaction_events import Event, OperationConfirmed
from transactions.state import TransactionState

# Events that record what was seen and change no leg, no status and no plan.
EVIDENCE_ONLY = frozenset({"EvidenceRecorded", "ObservationIgnored", "CommandIgnored"})

# The longest a staged decision waits under load, as a multiple of the idle interval.
MAX_STRETCH = 5

# A partition's next transaction starts no sooner than this many times its last one's
# duration after that one ended. Measured at concurrency 30 (bench --requests, 2-core box
# under load): 0 gave 1.15 CONCURRENT_TRANSACTIONS refusals per recon transaction and T 1.14,
# 0.5 gave 0.12 and T 0.98, 1 gave 0.02-0.03 and T 0.86-0.92 (the loop before: 0.09-0.19 and
# T 1.07-1.53). 2 in three interleaved pairs (stop 40): T 0.80-0.83 against 0.96-1.05, recon's
# own CPU +0.9, -2.3, +0.1 ms, so it was kept at 1 then; in 13 more (spacing45, stop 45,
# docs/benchmark.md "The group commit's spacing factor"): T lower in all 13 (1.06 -> 0.87),
# recon's Kafka requests in 12, its own CPU in 9 (mean -0.54 ms/tx, within the pairs' noise),
# throughput higher in 10 (+4 %), p50 lower in 10, p99 even (7 / 6), refusals 0.00-0.02. So 2:
# each transaction carries ~10 inputs instead of 7-8. The idle and alone spacing is
# IDLE_SPACING_S whatever this says, so concurrency 1 is unchanged (one pair: T 4.41 / 4.39,
# p50 34 / 29 ms).
SPACING = 2.0

# Idle (no backlog, `backlog`, and the partition's last transaction quicker than QUICK_S)
# the spacing is at most this: nothing else is coming to ride with the decision, so only
# the broker's markers of the last transaction are waited for (EndTxn answered ->
# WriteTxnMarkers done: p50 1 ms, p90 3 ms at concurrency 1 on a warm broker, bench
# --requests). The full spacing (the last transaction's duration, 5-10 ms) made 70 of the
# 300 decisions on a concurrency-1 transaction's path wait 5 ms on average.
IDLE_SPACING_S = 0.003
# A transaction slower than this says the broker is loaded: its markers take longer than
# IDLE_SPACING_S and inputs arrive while it runs, so the full spacing applies. With the
# backlog alone as the sign, a concurrency-30 run (loaded machine, transactions of ~90 ms,
# small fetches) went from 0.01 to 0.10 CONCURRENT_TRANSACTIONS refusals and T 0.92 -> 1.26.
# Unless the partition is alone (`spacing_bound`): then nothing is arriving to ride with its
# decision, and a provider's answer, the usual one, comes a call's time after the last
# transaction, its markers written by then. At concurrency 1 on a loaded machine (every
# transaction slower than this) the full spacing held 57 % of the answers (probed, 40 % by
# over 20 ms) and was 35 % of the slowest tenth's answer-to-commit time.
QUICK_S = 0.010


def nobody_waits(events: Sequence[Event], state: TransactionState) -> bool:
    """Whether a decision's `events` (`state` after them) may wait for the partition's next
    transaction: each records evidence only, or confirms a notification. A notification
    (on_commit, on_compensated) is dispatched after the transaction's outcome, its
    confirmation dispatches nothing and no step, plan or status moves by it (the API's
    `status` is already final): at concurrency 1 it came alone, a Kafka transaction of its
    own per README transaction, just before the notification's webhook. A notification
    that failed or is unknown is retried, looked up or reviewed: that commits at once."""
    return all(
        event.type in EVIDENCE_ONLY
        or (isinstance(event, OperationConfirmed) and _notification(state, event.action))
        for event in events
    )


def _notification(state: TransactionState, action: str) -> bool:
    operation = state.operation(action)
    return operation is not None and operation.spec.kind is not OperationKind.STEP


def next_start(due: float, ended_at: float, took_s: float, bound_s: float) -> float:
    """When a partition's next transaction may start, its staged decisions `due` then: no
    sooner than SPACING times the partition's last transaction's duration (`took_s`) after
    that one ended, and that spacing never more than `bound_s`."""
    return max(due, ended_at + min(SPACING * took_s, bound_s))


def backlog(fetched: int, partitions: int) -> bool:
    """Whether the last fetch brought more than one record per partition: inputs are
    arriving faster than one transaction per partition carries them."""
    return fetched > max(partitions, 1)


def spacing_bound(
    idle_s: float, fetched: int, partitions: int, took_s: float, *, alone: bool
) -> float:
    """The most a partition's next transaction is spaced from its last (`next_start`), which
    took `took_s`: MAX_STRETCH idle intervals under load, idle only the markers' time. Idle
    is no backlog and either a quick last transaction or the partition `alone` (no other
    partition has a decision that matters staged or on the wire, nor a call in flight; or the
    partition holds no live transaction but those the decision carries: Decider._start_at)."""
    bound = idle_s * MAX_STRETCH
    if backlog(fetched, partitions) or (took_s > QUICK_S and not alone):
        return bound
    return min(bound, IDLE_SPACING_S)


def interval(
    idle_s: float, fetched: int, partitions: int, *, answer_coming: bool, only_finished: bool
) -> float:
    """How long a staged decision may wait, given the records of the last fetch: the longest
    while a call of its partition is in flight (`answer_coming`), whose answer will open a
    transaction to carry it, or when every staged decision adds to a transaction that had
    already finished (`only_finished`: late evidence, which nothing reads to move on)."""
    if answer_coming or only_finished:
        return idle_s * MAX_STRETCH
    per_partition = fetched / max(partitions, 1)
    return idle_s * min(max(1.0, per_partition), MAX_STRETCH)
