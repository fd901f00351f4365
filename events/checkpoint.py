"""Signed checkpoints: Ed25519 signatures over the chain heads the decider wrote.

A hash chain shows that an event was removed, reordered or altered after the fact, but
anyone who can write the topic can rewrite a transaction's chain consistently. A
checkpoint is the decider's signed statement "transaction T's chain ended at seq N with
hash H" (one head per transaction it wrote since its last checkpoint): a rewritten chain no
longer ends at a signed head. docs/receipts.md specifies it byte for byte.

    signed   = JCS(the checkpoint without "signature")           (docs/canonical-form.md)
    signature = base64(Ed25519(private key, signed))
    key_id   = first 16 hex digits of sha256(raw 32-byte public key)

The key id is derived from the key, never chosen: rotating the key rotates the id, and a
verifier holding several public keys picks by it.

A checkpoint may also name the checkpoint record its writer wrote before it on the same
partition (`prev_checkpoint`, the hex SHA-256 of that record's value bytes), inside what
it signs. Whoever trusts the later checkpoint then knows every byte of the earlier one,
its signature included, and need not check that signature (services.cli.audit_signatures);
a link that names nothing on the log costs that check, never the verdict. Pure: no clock
(signed_at comes in), no I/O; the keys come from services.signing_keys.
"""

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from events.canonical import JCS, jcs

CHECKPOINT_TYPE = "ChainCheckpoint"
SCHEMA_VERSION = 1
# Heads per checkpoint record: a record stays far below the decider's MAX_RECORD_BYTES
# (a head is ~200 bytes), whatever a busy interval left to sign.
MAX_HEADS = 1000


@dataclass(frozen=True, slots=True)
class Head:
    tenant: str
    tx_id: str
    seq: int
    hash: str

    def as_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "tx_id": self.tx_id, "seq": self.seq, "hash": self.hash}


def raw_public_key(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_id(public: Ed25519PublicKey) -> str:
    return hashlib.sha256(raw_public_key(public)).hexdigest()[:16]


def public_key_from_base64(text: str) -> Ed25519PublicKey:
    """Raises ValueError for anything but 32 raw bytes in base64."""
    raw = base64.b64decode(text, validate=True)
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key is 32 bytes, got {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


def signed_bytes(checkpoint: dict[str, Any]) -> bytes:
    """What the signature covers: every member but the signature, in JCS."""
    return jcs({k: v for k, v in checkpoint.items() if k != "signature"})


def sign_checkpoint(
    private: Ed25519PrivateKey,
    signed_at: str,
    heads: list[Head],
    prev_checkpoint: str | None = None,
) -> dict[str, Any]:
    """One checkpoint of these heads (in (tenant, tx_id) order, so that the bytes do not
    depend on the order the batch met them), naming the record before it when given (a
    checkpoint without the member is one written before links, or the first of a run)."""
    body: dict[str, Any] = {
        "type": CHECKPOINT_TYPE,
        "schema_version": SCHEMA_VERSION,
        "canon": JCS,
        "key_id": key_id(private.public_key()),
        "signed_at": signed_at,
        "heads": [h.as_json() for h in sorted(heads, key=lambda h: (h.tenant, h.tx_id))],
    }
    if prev_checkpoint is not None:
        body["prev_checkpoint"] = prev_checkpoint
    body["signature"] = base64.b64encode(private.sign(signed_bytes(body))).decode("ascii")
    return body


def record_digest(value: bytes) -> str:
    """What a later checkpoint's prev_checkpoint names: the hex SHA-256 of a checkpoint
    record's value, byte for byte as on recon.checkpoints (not a canonical form: nothing
    needs to rebuild these bytes, a verifier hashes the ones it read)."""
    return hashlib.sha256(value).hexdigest()


@dataclass
class CheckpointChain:
    """The checkpoint records one writer puts on one partition, each naming the one before
    it. The name of the last is kept in memory only: a new writer (a restart, a take-over)
    starts a new chain, whose first record names nothing. The name is taken when a record
    is built, so one whose Kafka transaction then aborts is named by the next record though
    it is not on the log: that next record is then no help to its predecessor, which a
    verifier checks by its own signature."""

    last: str | None = None

    def records(self, private: Ed25519PrivateKey, signed_at: str, heads: list[Head]) -> list[bytes]:
        """The records signing these heads, MAX_HEADS a record, linked in order."""
        out = []
        for i in range(0, len(heads), MAX_HEADS):
            checkpoint = sign_checkpoint(private, signed_at, heads[i : i + MAX_HEADS], self.last)
            value = orjson.dumps(checkpoint)
            self.last = record_digest(value)
            out.append(value)
        return out


class CheckpointUnverifiable(Exception):
    """The signature could not be checked: its key is not known, or its form is not."""


class CheckpointInvalid(Exception):
    """The signature was checked and does not hold."""


def verify_checkpoint(checkpoint: dict[str, Any], keys: dict[str, Ed25519PublicKey]) -> None:
    """Returns when the signature holds under the key its key_id names; else raises
    CheckpointUnverifiable (unknown key or form) or CheckpointInvalid (a wrong signature:
    altered content, or another key claiming this key's id)."""
    if checkpoint.get("type") != CHECKPOINT_TYPE or checkpoint.get("canon") != JCS:
        raise CheckpointUnverifiable(
            f"not a {CHECKPOINT_TYPE} in a supported form "
            f"(type {checkpoint.get('type')!r}, canon {checkpoint.get('canon')!r})"
        )
    kid = checkpoint.get("key_id")
    public = keys.get(kid) if isinstance(kid, str) else None
    if public is None:
        raise CheckpointUnverifiable(f"signing key {kid!r} is not among the known keys")
    try:
        signature = base64.b64decode(str(checkpoint.get("signature", "")), validate=True)
        public.verify(signature, signed_bytes(checkpoint))
    except (InvalidSignature, ValueError) as error:
        raise CheckpointInvalid(f"the signature does not hold under key {kid}") from error


def heads_of(checkpoint: dict[str, Any]) -> list[Head]:
    return [Head(h["tenant"], h["tx_id"], h["seq"], h["hash"]) for h in checkpoint["heads"]]
