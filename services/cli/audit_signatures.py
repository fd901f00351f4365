"""`audit verify`'s check of the signed checkpoints (events.checkpoint) against the chains.

Each checkpoint on recon.checkpoints must hold its signature under a known key, and each
head it signs must be on the log: the transaction's event at that seq with that hash. A
rewritten chain (every hash recomputed, so the chain itself holds) fails here. A key not
known, or a form not supported, makes the checkpoint unverifiable, not invalid.

Checkpoints sit on the partition of the events they cover, so a process reading partition
p of both topics checks them alone (services.cli.audit_verify splits by partition). A
checkpoint that a later trusted one of its partition names by hash (prev_checkpoint,
events.checkpoint) is trusted without checking its own signature: one Ed25519 verify per
run of linked checkpoints instead of one per checkpoint (check_checkpoints says why the
verdict is the same).
"""

import base64
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nacl.exceptions import CryptoError
from nacl.signing import VerifyKey

from events.checkpoint import (
    CheckpointInvalid,
    CheckpointUnverifiable,
    Head,
    heads_of,
    raw_public_key,
    record_digest,
    verify_checkpoint,
)
from events.envelope import Chained

Located = tuple[Chained, str]


@dataclass(frozen=True)
class SignatureProblem:
    message: str
    location: str
    tenant: str | None
    tx_id: str | None
    seq: int | None
    unverifiable: bool


def _holds_fast(checkpoint: dict[str, Any], keys: dict[str, VerifyKey]) -> bool:
    """True when the signature holds over orjson's sorted bytes. Those are the JCS bytes
    for a checkpoint recon wrote (ASCII names, integers, strings): a signature that holds
    over them was made over exactly them, as events.chain_link argues for hashes.
    False means "ask the reference" (verify_checkpoint), never "invalid".

    The check is libsodium's (PyNaCl): 75 us of CPU a signature here against 130-180 us
    for OpenSSL's through cryptography, and one per checkpoint is most of what signatures
    add to `audit verify`. libsodium is the stricter of the two
    (canonical encodings, no small-order points), so what it accepts the reference accepts;
    what it refuses goes to the reference, which gives the verdict as before."""
    public = keys.get(checkpoint.get("key_id"))  # type: ignore[arg-type]
    signature = checkpoint.get("signature")
    if public is None or not isinstance(signature, str):
        return False
    body = {k: v for k, v in checkpoint.items() if k != "signature"}
    material = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    try:
        public.verify(material, base64.b64decode(signature, validate=True))
    except (CryptoError, ValueError, TypeError):
        return False
    return True


# One partition's checkpoint records (value, where it is), in log order.
Records = Sequence[tuple[bytes | None, str]]


@dataclass
class _Read:
    """A checkpoint record read, and whether its signature is trusted (None: not judged)."""

    value: bytes
    location: str
    checkpoint: dict[str, Any]
    heads: list[Head]
    trusted: bool | None = None

    def names(self, earlier: "_Read") -> bool:
        """Whether this checkpoint names `earlier` and is signed by the same key (a writer
        never changes keys within a chain: a key not known, or no longer, is never
        trusted through a link)."""
        link = self.checkpoint.get("prev_checkpoint")
        return (
            isinstance(link, str)
            and self.checkpoint.get("key_id") == earlier.checkpoint.get("key_id")
            and link == record_digest(earlier.value)
        )


def check_checkpoints(
    partitions: Iterable[Records],
    chain_of: Callable[[str, str], list[Located] | None],
    keys: dict[str, Ed25519PublicKey],
    wanted: Callable[[str, str], bool],
) -> tuple[list[SignatureProblem], set[tuple[str, str]]]:
    """Problems, and the transactions whose chain a valid checkpoint signed.

    Each partition's checkpoints are walked from the last. A checkpoint is trusted when
    the next record of its partition is a trusted checkpoint naming it (prev_checkpoint:
    the SHA-256 of its bytes, its signature included, under that one's valid signature),
    else when its own signature holds, as every checkpoint's did before links. A link can
    thus only spare a signature check, never change a verdict: a checkpoint altered in any
    byte is named by no trusted one and is checked on its own, and one that is named is
    byte for byte what the holder of the same key signed over (the decider names only the
    records it has just signed itself). Usually one signature per partition and writer is
    checked."""
    problems: list[SignatureProblem] = []
    signed: set[tuple[str, str]] = set()
    fast = {kid: VerifyKey(raw_public_key(public)) for kid, public in keys.items()}
    for records in partitions:
        found: list[list[SignatureProblem]] = []
        later: _Read | None = None
        for value, location in reversed(records):
            own: list[SignatureProblem] = []
            found.append(own)
            read = _read(value, location, own)
            if read is not None:
                _check_one(read, later, chain_of, keys, fast, wanted, signed, own)
            later = read
        problems += [problem for own in reversed(found) for problem in own]
    return problems, signed


def _read(value: bytes | None, location: str, problems: list[SignatureProblem]) -> _Read | None:
    try:
        checkpoint = orjson.loads(value or b"")
        return _Read(value or b"", location, checkpoint, heads_of(checkpoint))
    except (orjson.JSONDecodeError, KeyError, TypeError) as error:
        problems.append(
            SignatureProblem(f"not a checkpoint: {error!r}", location, None, None, None, False)
        )
        return None


def _check_one(
    read: _Read,
    later: _Read | None,
    chain_of: Callable[[str, str], list[Located] | None],
    keys: dict[str, Ed25519PublicKey],
    fast: dict[str, VerifyKey],
    wanted: Callable[[str, str], bool],
    signed: set[tuple[str, str]],
    problems: list[SignatureProblem],
) -> None:
    relevant = any(wanted(head.tenant, head.tx_id) for head in read.heads)
    if later is not None and later.names(read):
        if later.trusted is None:  # about none of the transactions asked for: judged now
            later.trusted = _signature(later, keys, fast, [])
        read.trusted = later.trusted or None
    if not relevant:
        return  # about none of the transactions asked for: judged if a wanted one needs it
    if read.trusted is None:
        read.trusted = _signature(read, keys, fast, problems)
    if not read.trusted:
        return
    for head in read.heads:
        if not wanted(head.tenant, head.tx_id):
            continue
        chain = chain_of(head.tenant, head.tx_id) or []
        event = _at_seq(chain, head.seq)
        where = f"{read.location}, event {event[1]}" if event else read.location
        if event is None:
            message = f"a checkpoint signs seq {head.seq}, which is not on the log"
        elif event[0].hash != head.hash:
            message = "hash is not the one the checkpoint signed (a rewritten chain)"
        else:
            signed.add((head.tenant, head.tx_id))
            continue
        problems.append(SignatureProblem(message, where, head.tenant, head.tx_id, head.seq, False))


def _signature(
    read: _Read,
    keys: dict[str, Ed25519PublicKey],
    fast: dict[str, VerifyKey],
    problems: list[SignatureProblem],
) -> bool:
    """Whether the checkpoint's own signature holds; the problem when it does not."""
    if _holds_fast(read.checkpoint, fast):
        return True
    try:
        verify_checkpoint(read.checkpoint, keys)
    except CheckpointUnverifiable as error:
        problems.append(SignatureProblem(str(error), read.location, None, None, None, True))
        return False
    except CheckpointInvalid as error:
        problems.append(SignatureProblem(str(error), read.location, None, None, None, False))
        return False
    return True


def _at_seq(chain: list[Located], seq: int) -> Located | None:
    # Usually seq n is at index n - 1; a damaged chain is searched.
    if 0 < seq <= len(chain) and chain[seq - 1][0].seq == seq:
        return chain[seq - 1]
    return next((located for located in chain if located[0].seq == seq), None)
