"""Prometheus metrics of every recon process, served on the process's own port (README,
"Metrics").

Each family is fed where what it counts already happens, at the cost of a counter
increment (or one histogram observation) per record at most: nothing here may add per
record work beyond that (the CPU per transaction is watched).

- transactions by status, operations by state, reviews opened: by the projector, from the
  views it folds with the decider's own rules (projections.moves), once the batch that
  moved them committed: every status the API shows is counted (`running` and
  `awaiting_approval` too), each transition once, never again after a redelivery (an
  envelope already applied moves nothing);
- dispatch latency and lookups: at the provider adapters (services.providers.measured),
  shared by the decider (which calls the providers of what it dispatches) and the
  reconciler;
- webhook verifications: the intake's webhook route;
- consumer lag: after each fetch of every consumer (`observe_lag`), and 0 for a partition
  the consumer lost in a rebalance (services.kafka_clients);
- each consumer group's members, state and time without a settled assignment: by the
  intake's group watch (services.intake.group_watch), asking the coordinators every 2 s,
  so a group whose consumers have stopped fetching still shows;
- accepted-to-committed time: by the projector, from the event times of a transaction that
  entered `committed` (projections.moves);
- HTTP requests and their duration: the intake's request wrapper (services.intake.
  request_span), by method, route template and status;
- dead letters: where a record is set aside (decider, projector, at-least-once consumers);
- the decider's Kafka transactions: from the batch's begin to its commit acknowledged, and
  counted by what they carry (decisions, or checkpoints alone) with the inputs they commit,
  so a benchmark reads transactions per recon transaction and inputs per transaction;
- reviews open, the age of the oldest open review and of the oldest unknown operation leg:
  gauges the reconciler refreshes from Postgres on its tick;
- kill switches engaged: a gauge each decider sets from the view of switches its dispatch
  gate refreshes anyway (services.dispatcher.gatekeeper); 0 in the other processes.
"""

import logging
from collections.abc import Mapping
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError
from prometheus_client import Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics import MetricWrapperBase

from projections.moves import Moves
from services.config import Settings

log = logging.getLogger(__name__)

# Each process's port when RECON_METRICS_PORT is not set, so that one of each on a host
# does not collide (a second copy of a process sets its own, or goes without: see serve).
DEFAULT_PORTS = {
    "intake": 9180,
    "decider": 9181,
    "projector": 9183,
    "saga": 9184,
    "reconciler": 9185,
    "intents": 9186,
}

TRANSACTIONS = Counter(
    "recon_transactions", "Transactions reaching each status (counted from events)", ["status"]
)
OPERATIONS = Counter(
    "recon_operations",
    "Operation legs reaching each state (counted from events; `pending` at acceptance)",
    ["state"],
)
REVIEWS_OPENED = Counter("recon_reviews_opened", "Manual reviews opened")
DISPATCH_SECONDS = Histogram(
    "recon_dispatch_seconds",
    "Time a provider took to answer an operation call, by what the answer meant",
    ["provider", "operation", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
LOOKUPS = Counter(
    "recon_lookups",
    "Lookups of an effect by key at a provider, by outcome",
    ["provider", "outcome"],
)
WEBHOOK_VERIFICATIONS = Counter(
    "recon_webhook_verifications",
    "Webhook deliveries of a configured provider, by signature check result",
    ["provider", "result"],
)
CONSUMER_LAG = Gauge(
    "recon_consumer_lag",
    "Records behind the partition's high watermark after the consumer's last fetch",
    ["group", "topic", "partition"],
)
CONSUMER_GROUP_MEMBERS = Gauge(
    "recon_consumer_group_members",
    "Members of each consumer group recon runs, as its coordinator said at the intake's last"
    " look (every 2 s)",
    ["group"],
)
CONSUMER_GROUP_STATE = Gauge(
    "recon_consumer_group_state",
    "1 for the state each consumer group was in at the intake's last look (Stable,"
    " PreparingRebalance, CompletingRebalance, Empty, Dead), 0 for the others",
    ["group", "state"],
)
CONSUMER_GROUP_UNSETTLED_SECONDS = Gauge(
    "recon_consumer_group_unsettled_seconds",
    "How long each consumer group has been without a settled assignment (Stable with a"
    " member), as the intake saw it; 0 when settled. Alert at the session timeout (10 s)",
    ["group"],
)
CONSUMER_GROUP_PROCESSES = Gauge(
    "recon_consumer_group_processes",
    "1 in each process whose member of the group has started (0 once stopped): summed over"
    " the processes scraped, the members the group should have",
    ["group"],
)
CONSUMER_GROUP_STUCK_SECONDS = Gauge(
    "recon_consumer_group_stuck_seconds",
    "How long each consumer group's position has not moved on a partition where records wait"
    " for it (or a transaction is open), the longest such partition, as the intake saw it; 0"
    " when none. Alert at 60 s (services.intake.group_progress.STUCK_AFTER_S)",
    ["group"],
)
CONSUMER_GROUP_WAITING_RECORDS = Gauge(
    "recon_consumer_group_waiting_records",
    "Records (offsets) between each consumer group's position and the log's end on the"
    " partitions counted by recon_consumer_group_stuck_seconds",
    ["group"],
)
REVIEWS_OPEN = Gauge("recon_reviews_open", "Manual reviews open now (refreshed by the reconciler)")
LEGS_GIVEN_UP = Gauge(
    "recon_reconciler_legs_given_up",
    "Operation legs still in flight whose review requests never took effect, so the pull"
    " reconciler stopped asking: a person must look (alert when above 0)",
)
KILL_SWITCHES_ENGAGED = Gauge(
    "recon_kill_switches_engaged",
    "Kill switches engaged now, every tenant (as the decider's gate last saw them)",
)
ACCEPTED_TO_COMMITTED = Histogram(
    "recon_accepted_to_committed_seconds",
    "Time from a transaction's acceptance to its commit (the two events' times)",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800),
)
HTTP_REQUESTS = Counter(
    "recon_http_requests",
    "Requests the intake answered, by method, route template and status code",
    ["method", "route", "status"],
)
HTTP_REQUEST_SECONDS = Histogram(
    "recon_http_request_seconds",
    "Time the intake took to answer a request, by method and route template",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
DRIFT_LISTINGS = Counter(
    "recon_drift_listings",
    "Provider listings the drift scan read, by outcome: `whole`; `cut` (a page cap left"
    " older effects out: their legs' absence is not judged); `unavailable` (not read at"
    " all) and `unreadable` (an item is not an effect: a key or a zoned time missing):"
    " the account was not compared. Alert on any but `whole` that persists",
    ["provider", "outcome"],
)
DRIFT_GRACES_GIVEN_UP = Counter(
    "recon_drift_graces_given_up",
    "Hole listings of the drift scan that held more than a page cap within two graces of"
    " the hole's top, so the legs of the grace below it were given up (not judged for a"
    " missing effect): the provider made effects faster than the listing's cap holds."
    " Alert on any: raise the cap (RECON_DRIFT_LIST_PAGES, a provider file's max_pages)",
    ["provider"],
)
RECEIPT_RECORDS_READ = Counter(
    "recon_receipt_records_read",
    "Kafka records the receipt route read to build its bundles (its transactions' windows)",
)
DEAD_LETTERS = Counter(
    "recon_dead_letters",
    "Records set aside on the dead-letter topic, by the reason's first clause",
    ["reason"],
)
DECIDER_TRANSACTION_SECONDS = Histogram(
    "recon_decider_transaction_seconds",
    "Time from the decider opening a Kafka transaction to its commit acknowledged",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
DECIDER_INPUT_WAIT_SECONDS = Histogram(
    "recon_decider_input_wait_seconds",
    "Time from an input's record being written (its CreateTime) to the decider deciding it:"
    " the fetch, and any wait of the decider's loop",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
DECIDER_TRANSACTIONS = Counter(
    "recon_decider_kafka_transactions",
    "Kafka transactions the decider committed, by what they carry: `decisions` (inputs with"
    " their offsets) or `checkpoints` (signed checkpoints of a quiet partition alone)",
    ["carries"],
)
DECIDER_INPUTS_COMMITTED = Counter(
    "recon_decider_inputs_committed",
    "Inputs whose decisions and offsets the decider committed (divided by the `decisions`"
    " transactions: inputs per Kafka transaction)",
)
PROJECTOR_BATCHES = Counter(
    "recon_projector_batches",
    "Batches of recon.events and recon.drift records the projector committed to Postgres",
)
PROJECTOR_STATEMENTS = Counter(
    "recon_projector_statements",
    "Statements the projector sent to Postgres (BEGIN and COMMIT, each executemany and the"
    " reads of its offsets included; divided by the batches: statements per batch)",
)
OLDEST_UNKNOWN_SECONDS = Gauge(
    "recon_oldest_unknown_operation_seconds",
    "Age of the oldest operation leg whose outcome is unknown (0 when none; by the reconciler)",
)
OLDEST_OPEN_REVIEW_SECONDS = Gauge(
    "recon_oldest_open_review_seconds",
    "Age of the oldest manual review still open (0 when none; by the reconciler)",
)
KAFKA_INTENTS = Counter(
    "recon_kafka_intents",
    "Intents read from the Kafka intents topics, by answer (`accepted` or the error code)",
    ["result"],
)


# A labelled child by its label values, kept once made. prometheus_client's `labels()`
# checks the values, builds their key and takes the family's lock at every call (~6 us; the
# intake asked three times per request: ~2 % of its CPU at c30, issue 24). A family keeps
# each child it made for the process's life (nothing in recon removes one), so handing the
# same child out again counts exactly as `labels()` would; and this map holds no more
# entries than the families' own children.
_children: dict[tuple[MetricWrapperBase, tuple[str, ...]], Any] = {}

Family = TypeVar("Family", bound=MetricWrapperBase)


def labelled(family: Family, *values: str) -> Family:
    """`family.labels(*values)`, made once per distinct values."""
    key = (family, values)
    child: Family | None = _children.get(key)
    if child is None:
        child = _children[key] = family.labels(*values)
    return child


def serve(process: str, settings: Settings) -> int | None:
    """Serve /metrics on RECON_METRICS_PORT (or the process's default port). A port already
    taken is logged and skipped: metrics are not worth stopping a decider for."""
    port = settings.metrics_port or DEFAULT_PORTS.get(process)
    if port is None:
        return None
    try:
        start_http_server(port, addr=settings.metrics_host)
    except OSError as error:
        log.warning("metrics not served: port %d is not free (%s)", port, error)
        return None
    log.info("metrics on http://%s:%d/metrics", settings.metrics_host, port)
    return port


# --- transitions (the projector's, once its batch committed) ---------------------------


def count_moves(moves: Moves) -> None:
    """The statuses a committed batch moved transactions and operations into: a few
    increments per batch, read off the views the projector folds anyway."""
    for status, n in moves.transactions.items():
        labelled(TRANSACTIONS, status.value).inc(n)
    for state, n in moves.operations.items():
        labelled(OPERATIONS, state.value).inc(n)
    if moves.reviews_opened:
        REVIEWS_OPENED.inc(moves.reviews_opened)
    for seconds in moves.committed_after_s:
        ACCEPTED_TO_COMMITTED.observe(seconds)


# Reasons are free text ("unreadable event: <the parser's message>"); the label keeps the
# first clause only, so a message with ids in it cannot create a series per record.
REASON_LABEL_CHARS = 60


def dead_lettered(reason: str) -> None:
    DEAD_LETTERS.labels(reason.partition(":")[0].strip()[:REASON_LABEL_CHARS]).inc()


# --- consumers -----------------------------------------------------------------------


async def observe_lag(
    consumer: AIOKafkaConsumer, group: str, partitions: Mapping[TopicPartition, list[Any]]
) -> None:
    """After a fetch: each fetched partition's distance from its high watermark. From the
    consumer's position, not the last record: a read_committed reader's position is past
    the transaction markers, which take offsets too (a caught-up decider reader would
    otherwise show a lag of 1 for ever). The position is known after a fetch: no request."""
    assigned = consumer.assignment()
    for tp, records in partitions.items():
        high = consumer.highwater(tp)
        if not records or high is None or tp not in assigned:
            continue  # revoked during the fetch: the new owner reports it
        try:
            position = await consumer.position(tp)
        except IllegalStateError:
            continue
        labelled(CONSUMER_LAG, group, tp.topic, str(tp.partition)).set(max(0, high - position))
