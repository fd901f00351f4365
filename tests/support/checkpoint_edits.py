"""Checkpoint records altered after signing, as a forger would alter them, and re-signed
as a decider from before links wrote them: the tests of linked checkpoints
(tests/unit/test_checkpoint_check.py, tests/integration/test_linked_checkpoints.py)."""

import base64
from collections.abc import Callable
from typing import Any

import orjson

from events.checkpoint import Head, sign_checkpoint
from services.signing_keys import development_key


def edited(value: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    checkpoint = orjson.loads(value)
    change(checkpoint)
    return orjson.dumps(checkpoint)


def flip_signature(checkpoint: dict[str, Any]) -> None:
    raw = bytearray(base64.b64decode(checkpoint["signature"]))
    raw[5] ^= 1
    checkpoint["signature"] = base64.b64encode(bytes(raw)).decode("ascii")


def other_head(checkpoint: dict[str, Any]) -> None:
    checkpoint["heads"][0]["hash"] = "0" * 64


def other_link(checkpoint: dict[str, Any]) -> None:
    checkpoint["prev_checkpoint"] = "0" * 64


# Each a different byte range of an earlier checkpoint: a head, the signature, the link.
ALTERATIONS = (other_head, flip_signature, other_link)


def unlinked(value: bytes) -> bytes:
    """As a decider from before links signed it (development key): the same heads, no
    prev_checkpoint."""
    checkpoint = orjson.loads(value)
    heads = [Head(**h) for h in checkpoint["heads"]]
    return orjson.dumps(sign_checkpoint(development_key(), checkpoint["signed_at"], heads))
