"""Canonical JSON and the payload fingerprint an idempotency key is bound to.

The fingerprint covers the operation's payload only. `metadata` (recon's op_key and the like)
is correlation data: a retry that carries different metadata is still the same request.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_fingerprint(payload: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of `payload` (which must already exclude metadata)."""
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()
