"""`audit verify`'s check of the signed checkpoints (events.checkpoint) against the chains.

Each checkpoint on recon.checkpoints must hold its signature under a known key, and each
head it signs must be on the log: the transaction's event at that seq with that hash. A
rewritten chain (every hash recomputed, so the chain itself holds) fails here. A key not
known, or a form not supported, makes the checkpoint unverifiable, not invalid.

Checkpoints sit on the partition of the events they cover, so a process reading partition
p of both topics checks them alone (services.cli.audit_verify splits by partition).
"""

import base64
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nacl.exceptions import CryptoError
from nacl.signing import VerifyKey

from events.checkpoint import (
    CheckpointInvalid,
    CheckpointUnverifiable,
    heads_of,
    raw_public_key,
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


def check_checkpoints(
    checkpoints: list[tuple[bytes | None, str]],
    chain_of: Callable[[str, str], list[Located] | None],
    keys: dict[str, Ed25519PublicKey],
    wanted: Callable[[str, str], bool],
) -> tuple[list[SignatureProblem], set[tuple[str, str]]]:
    """Problems, and the transactions whose chain a valid checkpoint signed."""
    problems: list[SignatureProblem] = []
    signed: set[tuple[str, str]] = set()
    fast = {kid: VerifyKey(raw_public_key(public)) for kid, public in keys.items()}
    for value, location in checkpoints:
        for problem in _check_one(value, location, chain_of, keys, fast, wanted, signed):
            problems.append(problem)
    return problems, signed


def _check_one(
    value: bytes | None,
    location: str,
    chain_of: Callable[[str, str], list[Located] | None],
    keys: dict[str, Ed25519PublicKey],
    fast: dict[str, VerifyKey],
    wanted: Callable[[str, str], bool],
    signed: set[tuple[str, str]],
) -> Iterator[SignatureProblem]:
    try:
        checkpoint = orjson.loads(value or b"")
        heads = heads_of(checkpoint)
    except (orjson.JSONDecodeError, KeyError, TypeError) as error:
        yield SignatureProblem(f"not a checkpoint: {error!r}", location, None, None, None, False)
        return
    if not any(wanted(head.tenant, head.tx_id) for head in heads):
        return  # about none of the transactions asked for
    if not _holds_fast(checkpoint, fast):
        try:
            verify_checkpoint(checkpoint, keys)
        except CheckpointUnverifiable as error:
            yield SignatureProblem(str(error), location, None, None, None, True)
            return
        except CheckpointInvalid as error:
            yield SignatureProblem(str(error), location, None, None, None, False)
            return
    for head in heads:
        if not wanted(head.tenant, head.tx_id):
            continue
        chain = chain_of(head.tenant, head.tx_id) or []
        event = _at_seq(chain, head.seq)
        where = f"{location}, event {event[1]}" if event else location
        if event is None:
            message = f"a checkpoint signs seq {head.seq}, which is not on the log"
        elif event[0].hash != head.hash:
            message = "hash is not the one the checkpoint signed (a rewritten chain)"
        else:
            signed.add((head.tenant, head.tx_id))
            continue
        yield SignatureProblem(message, where, head.tenant, head.tx_id, head.seq, False)


def _at_seq(chain: list[Located], seq: int) -> Located | None:
    # Usually seq n is at index n - 1; a damaged chain is searched.
    if 0 < seq <= len(chain) and chain[seq - 1][0].seq == seq:
        return chain[seq - 1]
    return next((located for located in chain if located[0].seq == seq), None)
