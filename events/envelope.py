"""The envelope every event travels in, and the per-transaction hash chain.

hash = sha256(prev_hash || canonical_json(everything in the envelope but hash)).
Chained per transaction, so removing, reordering or altering one event breaks every
hash after it, and an auditor can check a transaction alone (promise 6).
"""

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from events.canonical import canonical_json, sha256_hex
from events.keys import event_id
from events.model import Message
from events.transaction_events import Event, event_data, event_from

GENESIS_HASH = "0" * 64


class Envelope(Message):
    event_id: str
    tenant: str
    tx_id: str
    seq: int
    type: str
    schema_version: int
    causation_id: str
    correlation_id: str
    occurred_at: str
    prev_hash: str
    hash: str
    data: dict[str, Any]

    def event(self) -> Event:
        return event_from(self.type, self.data)

    def expected_hash(self) -> str:
        return chain_hash(self.prev_hash, self.model_dump(mode="json", exclude={"hash"}))

    def hash_matches(self) -> bool:
        return self.expected_hash() == self.hash


class Chained(Protocol):
    """What verify_chain reads of an event: an Envelope, or the auditor's lighter
    events.chain_link.Link that has checked its content hash already."""

    @property
    def seq(self) -> int: ...
    @property
    def prev_hash(self) -> str: ...
    @property
    def hash(self) -> str: ...
    def hash_matches(self) -> bool: ...


def chain_hash(prev_hash: str, body: dict[str, Any]) -> str:
    return sha256_hex(prev_hash.encode("ascii") + canonical_json(body))


def seal(
    *,
    tenant: str,
    tx_id: str,
    last_seq: int,
    last_hash: str,
    events: list[Event],
    causation_id: str,
    occurred_at: datetime,
) -> list[Envelope]:
    """Wrap decided events, continuing the transaction's seq and hash chain."""
    sealed: list[Envelope] = []
    seq, prev = last_seq, last_hash
    for event in events:
        seq += 1
        body: dict[str, Any] = {
            "event_id": event_id(tenant, tx_id, seq),
            "tenant": tenant,
            "tx_id": tx_id,
            "seq": seq,
            "type": event.type,
            "schema_version": event.schema_version,
            "causation_id": causation_id,
            "correlation_id": f"{tenant}/{tx_id}",
            "occurred_at": occurred_at.isoformat(),
            "prev_hash": prev,
            "data": event_data(event),
        }
        prev = chain_hash(prev, body)
        sealed.append(Envelope(**body, hash=prev))
    return sealed


def verify_chain(envelopes: Sequence[Chained]) -> list[str]:
    """Problems found in one transaction's events, in seq order; empty when intact."""
    problems: list[str] = []
    prev, expected_seq = GENESIS_HASH, 1
    for env in envelopes:
        if env.seq != expected_seq:
            problems.append(f"seq {env.seq} where {expected_seq} was expected")
        # Carry on from what is there, so one gap is reported once, not at every later event.
        expected_seq = env.seq + 1
        if env.prev_hash != prev:
            problems.append(f"seq {env.seq}: prev_hash does not match the previous event")
        if not env.hash_matches():
            problems.append(f"seq {env.seq}: hash does not match its content")
        prev = env.hash
    return problems
