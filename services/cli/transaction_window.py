"""Where one transaction's records are on the log: the window of its partitions that
`audit timeline`, `audit bundle` and the receipt route read, instead of the partitions
from offset 0 (docs/audit.md, docs/receipts.md "What a bundle reads").

The projection places the transaction (`Known`: its first event's time, its last seq, how
far the projector has read), Kafka's time index turns times into offsets, and what the
records say checks the window: seq 1 must be in the events' window (nothing of a
transaction comes before its first event), and every event's cause (its causation_id, the
input's message_id) in the inputs' window (every event was decided from an input on
recon.commands or recon.observations). A window that misses either is widened, down to the
whole partition, so a window too small costs a second read, never a missing record.
"""

import json
import re
import sys
from dataclasses import dataclass
from typing import Any, TypeAlias

import asyncpg
from aiokafka.structs import TopicPartition

from projections.offsets import load_offsets
from services.cli.partition_reader import PartitionReader, Record

# How far Kafka's timestamps of one transaction's records may stray from the times the
# projection holds (the clocks of the intake, the dispatchers and the decider, and the
# decider's delay). Too small costs a second read, never a missing record: the events'
# seqs and causation ids say when the window missed something, and it is widened.
SLACK_MS = 30_000

# A record and its JSON body.
Found: TypeAlias = tuple[Record, dict[str, Any]]

# The characters of a tx_id the API accepts: JSON writes them as they are, so a record of
# the transaction holds them byte for byte (a cheap sieve before parsing).
_PLAIN_TX_ID = re.compile(r"[A-Za-z0-9._:-]+")


@dataclass(frozen=True)
class Known:
    """What the projection knows of one transaction: enough to place it on the log."""

    tenant: str
    first_at_ms: int  # occurred_at of its first event
    last_seq: int
    projected_to: dict[int, int]  # partition of recon.events -> next offset the projector reads


async def known_of(
    conn: asyncpg.Connection, events_topic: str, tenant: str | None, tx_id: str
) -> list[Known]:
    """The transaction's tenants (`tenant` alone when given) that have projected events."""
    if tenant is None:
        rows = await conn.fetch("SELECT tenant FROM transactions WHERE tx_id = $1", tx_id)
        tenants = sorted(r["tenant"] for r in rows)
    else:
        tenants = [tenant]
    # Read before the events: a projector commit in between only makes last_seq newer.
    offsets = await load_offsets(conn, events_topic)
    known = []
    for t in tenants:
        row = await conn.fetchrow(
            "SELECT min(occurred_at) AS first_at, max(seq) AS last_seq FROM events"
            " WHERE tenant = $1 AND tx_id = $2",
            t,
            tx_id,
        )
        if row is not None and row["last_seq"] is not None:
            first_ms = int(row["first_at"].timestamp() * 1000)
            known.append(Known(t, first_ms, row["last_seq"], offsets))
    return known


async def ask_projection(
    database_url: str, events_topic: str, tenant: str | None, tx_id: str
) -> list[Known]:
    """`known_of` for a command: empty when the projection is unreachable or does not know
    the transaction (the command then finds it on the log alone)."""
    try:
        conn = await asyncpg.connect(database_url, timeout=3)
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        print(f"audit: projection unreachable ({exc}); reading the log", file=sys.stderr)
        return []
    try:
        return await known_of(conn, events_topic, tenant, tx_id)
    except asyncpg.PostgresError as exc:  # e.g. a database without the schema
        print(f"audit: projection not readable ({exc}); reading the log", file=sys.stderr)
        return []
    finally:
        await conn.close()


class Transaction:
    """The one transaction's records among the records of its partitions."""

    def __init__(self, tenant: str | None, tx_id: str) -> None:
        self.tenant = tenant
        self.tx_id = tx_id
        self._needle = tx_id.encode() if _PLAIN_TX_ID.fullmatch(tx_id) else None

    def mentions(self, record: Record) -> bool:
        """Whether the record may name the transaction (a cheap sieve before parsing: most
        records of a partition are other transactions')."""
        return self._needle is None or self._needle in (record.value or b"")

    def body(self, record: Record) -> dict[str, Any] | None:
        """The record's body if it is the transaction's, else None."""
        if not self.mentions(record):
            return None
        try:
            body = json.loads(record.value or b"")
        except ValueError:
            return None  # unreadable records are audit verify's business
        if not isinstance(body, dict) or body.get("tx_id") != self.tx_id:
            return None
        if self.tenant is not None and body.get("tenant") != self.tenant:
            return None
        return body

    def keep(self, record: Record) -> bool:
        return self.body(record) is not None

    def located(self, records: list[Record]) -> list[Found]:
        return [(r, b) for r in records if (b := self.body(r)) is not None]


async def events_of(
    log: PartitionReader, tp: TopicPartition, tx: Transaction, hint: Known | None
) -> list[Found]:
    """The transaction's events on `tp`, in log order."""
    if hint is None:
        # Not projected (or no projection): the events are somewhere in their partition.
        return tx.located((await log.read(tp, 0, None, tx.keep))[0])
    last_seq = hint.last_seq

    def last(record: Record) -> bool:
        return (tx.body(record) or {}).get("seq") == last_seq

    slack = SLACK_MS
    while True:
        start = await log.offset_at(tp, hint.first_at_ms - slack)
        events, stopped = await log.read(tp, start, None, tx.keep, last)
        # Seq 1 in the window: it starts early enough (nothing of this transaction comes
        # before its first event). Else widen it, down to offset 0.
        if any((tx.body(r) or {}).get("seq") == 1 for r in events) or start == 0:
            break
        slack *= 4
    # Events written after the projection last read this partition: the tail.
    tail_from = max(stopped, hint.projected_to.get(tp.partition, 0))
    events += (await log.read(tp, tail_from, None, tx.keep))[0]
    return tx.located(events)


async def inputs_of(
    log: PartitionReader,
    tps: list[TopicPartition],
    tx: Transaction,
    events: list[Found],
    hint: Known | None,
) -> dict[TopicPartition, list[Found]]:
    """The transaction's records on each of `tps` (its partitions of recon.commands and
    recon.observations) from SLACK_MS before its first event to SLACK_MS after its last,
    widened until every event's cause is in it; each in log order. `events` is not empty."""
    causes = {str(b.get("causation_id")) for _, b in events}
    first_ms = min(r.timestamp for r, _ in events)
    if hint is not None:
        first_ms = min(first_ms, hint.first_at_ms)
    last_ms = max(r.timestamp for r, _ in events)
    slack = SLACK_MS
    while True:
        inputs: dict[TopicPartition, list[Found]] = {}
        whole = True
        for tp in tps:
            start = await log.offset_at(tp, first_ms - slack)
            stop = await log.offset_at(tp, last_ms + slack)
            whole = whole and start == 0 and stop == await log.end(tp)
            inputs[tp] = tx.located((await log.read(tp, start, stop, tx.keep))[0])
        # Every event was decided from an input on these topics: an event whose input is
        # not in the window says the window is too narrow.
        found = {str(b.get("message_id")) for records in inputs.values() for _, b in records}
        if causes <= found or whole:
            return inputs
        slack *= 4
