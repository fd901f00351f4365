"""The envelope every event travels in, and the per-transaction hash chain.

hash = sha256(prev_hash || canonical form of everything in the envelope but hash), the form
being the one the envelope's `canon` names (docs/canonical-form.md): `jcs` for every event
sealed now, none (legacy-json) for the events sealed before it existed. Chained per
transaction, so removing, reordering or altering one event breaks every hash after it, and
an auditor can check a transaction alone (promise 6).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pydantic import Field

from events.canonical import (
    JCS,
    SUPPORTED,
    canonical_bytes,
    canonical_json,
    form_name,
    jcs_expressible,
    sha256_hex,
)
from events.keys import event_id
from events.model import Message, absent
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
    # Absent on the events sealed before canonical forms were named (legacy-json): such an
    # envelope is serialized without the field, so its content, and its hash, stay as sealed.
    canon: str | None = Field(default=None, exclude_if=absent)
    hash: str
    data: dict[str, Any]

    def event(self) -> Event:
        return event_from(self.type, self.data)

    def expected_hash(self) -> str:
        """Raises UnsupportedCanon when `canon` names a form this code does not know."""
        return chain_hash(self.prev_hash, self.model_dump(mode="json", exclude={"hash"}))

    def hash_matches(self) -> bool:
        return form_name(self.canon) in SUPPORTED and self.expected_hash() == self.hash


class Chained(Protocol):
    """What verify_chain reads of an event: an Envelope, or the auditor's lighter
    events.chain_link.Link that has checked its content hash already."""

    @property
    def seq(self) -> int: ...
    @property
    def prev_hash(self) -> str: ...
    @property
    def hash(self) -> str: ...
    @property
    def canon(self) -> str | None: ...
    def hash_matches(self) -> bool: ...


def chain_hash(prev_hash: str, body: dict[str, Any]) -> str:
    """The hash of an envelope's content (body: all but `hash`), in the form it names."""
    return sha256_hex(prev_hash.encode("ascii") + canonical_bytes(body.get("canon"), body))


def _sealed_hash(prev_hash: str, body: dict[str, Any]) -> str:
    """Names JCS in body and hashes it so, unless JCS cannot hold the content exactly (an
    integer beyond 2**53 in a payload): then the event stays legacy-json, which can, and
    says so by having no `canon`. The decider must seal whatever the agent sent."""
    body["canon"] = JCS
    content = jcs_expressible(body)
    if content is None:
        del body["canon"]
        content = canonical_json(body)
    return sha256_hex(prev_hash.encode("ascii") + content)


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
    at, correlation_id = occurred_at.isoformat(), f"{tenant}/{tx_id}"
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
            "correlation_id": correlation_id,
            "occurred_at": at,
            "prev_hash": prev,
            "data": event_data(event),
        }
        prev = body["hash"] = _sealed_hash(prev, body)
        # Validated, though every value is of its field's type by construction: pydantic-core
        # checks these plain values faster than model_construct copies them in Python
        # (2.6 against 4.9 us an envelope, pydantic 2.14).
        sealed.append(Envelope.model_validate(body))
    return sealed


@dataclass(frozen=True)
class ChainProblem:
    """One finding of verify_chain. `unverifiable`: the event could not be checked (a
    canonical form not supported), which is not proof of tampering: the verdict is
    UNVERIFIABLE rather than INVALID when nothing else is wrong."""

    seq: int
    message: str
    unverifiable: bool = False

    def __str__(self) -> str:
        return f"seq {self.seq}{self.message}"


def verify_chain(envelopes: Sequence[Chained]) -> list[ChainProblem]:
    """Problems found in one transaction's events, in seq order; empty when intact."""
    problems: list[ChainProblem] = []
    prev, expected_seq = GENESIS_HASH, 1
    for env in envelopes:
        if env.seq != expected_seq:
            problems.append(ChainProblem(env.seq, f" where {expected_seq} was expected"))
        # Carry on from what is there, so one gap is reported once, not at every later event.
        expected_seq = env.seq + 1
        if env.prev_hash != prev:
            problems.append(ChainProblem(env.seq, ": prev_hash does not match the previous event"))
        if form_name(env.canon) not in SUPPORTED:
            unsupported = f": canonical form {env.canon!r} is not supported"
            problems.append(ChainProblem(env.seq, unsupported, unverifiable=True))
        elif not env.hash_matches():
            problems.append(ChainProblem(env.seq, ": hash does not match its content"))
        prev = env.hash
    return problems
