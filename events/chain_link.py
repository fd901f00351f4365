"""The auditor's fast reading of a recon.events record: what verify_chain needs of it, and
whether its content matches its hash, without building the pydantic Envelope.

It must give the verdict the reference path gives (projections.decode.decode_envelope, then
Envelope.hash_matches), or none at all:

- A record is read here only when its JSON has exactly the envelope's fields with exactly
  their JSON types (strings, integers that are not booleans, an object for data). For such
  a body pydantic's validation is the identity, so the values are the Envelope's. Anything
  else (an unknown or missing field, "3" for a seq, a number orjson cannot hold, NaN, not
  JSON at all) returns None and the caller takes the reference path, which also words
  the problem.
- The event in `data` is validated by the very adapter Envelope.event() uses.
- The content hash is first computed over orjson's sorted bytes, whichever canonical form
  the envelope names (JCS or legacy-json: for the strings and integers of an envelope the
  three spell the same bytes). When it matches the stored hash, the reference bytes match
  too: equal hashes mean (short of a SHA-256 collision) equal bytes, those bytes parse back
  to one JSON value, and the named form of that value is exactly the bytes the sealer
  hashed. When it does not match (an altered event, or a value orjson spells differently,
  such as 1e+16 or 1.0), the reference serialization (events.envelope.chain_hash) decides.
- A `canon` this code does not support returns None: the reference path reports it.
"""

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from events.canonical import SUPPORTED
from events.envelope import Envelope, chain_hash
from events.transaction_events import event_adapter

_FIELDS = frozenset(Envelope.model_fields)
_LEGACY_FIELDS = _FIELDS - {"canon"}  # an envelope sealed before forms were named
_TEXT = (
    "event_id",
    "tenant",
    "tx_id",
    "type",
    "causation_id",
    "correlation_id",
    "occurred_at",
    "prev_hash",
    "hash",
)


@dataclass(frozen=True, slots=True)
class Link:
    tenant: str
    tx_id: str
    seq: int
    prev_hash: str
    hash: str
    canon: str | None
    content_matches: bool

    def hash_matches(self) -> bool:
        return self.content_matches


def read_link(value: bytes | None) -> Link | None:
    """The record's link, or None: read it with the reference path instead."""
    try:
        body: Any = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return None
    if type(body) is not dict:
        return None
    keys = body.keys()
    if keys == _FIELDS:
        canon = body["canon"]
        if type(canon) is not str or canon not in SUPPORTED:
            return None
    elif keys == _LEGACY_FIELDS:
        canon = None
    else:
        return None
    for name in _TEXT:
        if type(body[name]) is not str:
            return None
    seq, data = body["seq"], body["data"]
    if type(seq) is not int or type(body["schema_version"]) is not int or type(data) is not dict:
        return None
    try:
        event_adapter.validate_python({**data, "type": body["type"]})
    except ValidationError:
        return None
    stored = body.pop("hash")
    prev = body["prev_hash"]
    material = prev.encode("ascii") + orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    matches = hashlib.sha256(material).hexdigest() == stored
    if not matches:
        matches = chain_hash(prev, body) == stored
    return Link(body["tenant"], body["tx_id"], seq, prev, stored, canon, matches)
