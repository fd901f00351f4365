"""Canonical JSON and payload fingerprints.

Two bodies that mean the same thing must hash the same, whatever order their keys
came in or however they were spaced: fingerprints decide whether a resubmission is
"the same intent" and hash chains must be recomputable by an auditor in any language.
"""

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8, no NaN (not portable)."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fingerprint(value: Any) -> str:
    return sha256_hex(canonical_json(value))
