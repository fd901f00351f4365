"""How `audit rebuild --compare` cuts what the rebuild holds into slices, so that it holds
one slice of each side at a time, never a whole database: its memory is bounded by the
slice, not by the log (an operator runs the compare against a production-sized database,
and it is what they run when something already looks wrong: an OOM kill then is the worst
answer).

A slice is a run of the rebuild's transactions in key order: the rows of their
transactions, operations and reviews, and their events up to the rebuild's last seq, at
most SLICE_TRANSACTIONS transactions and SLICE_EVENTS events. The rebuild's `last_seq` of a
transaction is its number of events, so the events are counted before they are read. A
transaction with more events than a slice holds (nothing caps a transaction's observations:
a provider that sends the same webhook again and again adds an ObservationIgnored each
time) has its events read in parts of at most SLICE_EVENTS by seq, its other rows with the
first part. Every row of a transaction's tables is in the slice of its transaction, and
every event in one part, so the slices together read exactly the rows a compare of the
whole reads, each once.

Pure: no I/O.
"""

from collections.abc import Iterator
from dataclasses import dataclass

TxKey = tuple[str, str]

# Events one slice holds per side, at most: a few MiB of rows each side (about 3 KiB per
# row held, decoded, measured with docs/audit.md's benchmark; an event is at most the
# decider's record bound, 512 KiB, so never more than 1 GiB a side), and comparing them
# takes milliseconds, which is how long the live snapshot sits idle between two slices.
SLICE_EVENTS = 2_000
# Transactions one slice holds, at most (their operations and reviews come with them).
SLICE_TRANSACTIONS = 250


@dataclass(frozen=True)
class SliceSize:
    """The most one slice holds per side (tests take small ones)."""

    events: int = SLICE_EVENTS
    transactions: int = SLICE_TRANSACTIONS


DEFAULT_SLICE = SliceSize()


@dataclass(frozen=True)
class EventsRange:
    """The events of one transaction with after < seq <= upto (after None: from the first,
    so that a row with a seq below 1 is read as a compare of the whole reads it)."""

    tenant: str
    tx_id: str
    after: int | None
    upto: int


@dataclass(frozen=True)
class Slice:
    # The transactions whose transactions, operations and reviews rows this slice reads,
    # with the rebuild's last seq of each.
    last_seqs: dict[TxKey, int]
    events: tuple[EventsRange, ...]


def slices_of(page: list[tuple[str, str, int]], size: SliceSize) -> Iterator[Slice]:
    """The slices of a page of the rebuild's (tenant, tx_id, last_seq) in its order, of at
    most `size.transactions` keys (the page holds no more)."""
    most_events = size.events
    last_seqs: dict[TxKey, int] = {}
    events: list[EventsRange] = []
    held = 0
    for tenant, tx_id, last_seq in page:
        if last_seq > most_events:
            if last_seqs:
                yield Slice(last_seqs, tuple(events))
                last_seqs, events, held = {}, [], 0
            yield from _long(tenant, tx_id, last_seq, most_events)
            continue
        if last_seqs and held + last_seq > most_events:
            yield Slice(last_seqs, tuple(events))
            last_seqs, events, held = {}, [], 0
        last_seqs[(tenant, tx_id)] = last_seq
        events.append(EventsRange(tenant, tx_id, None, last_seq))
        held += max(last_seq, 1)
    if last_seqs:
        yield Slice(last_seqs, tuple(events))


def _long(tenant: str, tx_id: str, last_seq: int, most_events: int) -> Iterator[Slice]:
    yield Slice({(tenant, tx_id): last_seq}, (EventsRange(tenant, tx_id, None, most_events),))
    for after in range(most_events, last_seq, most_events):
        upto = min(after + most_events, last_seq)
        yield Slice({}, (EventsRange(tenant, tx_id, after, upto),))
