"""Canonical JSON and payload fingerprints.

Two bodies that mean the same thing must hash the same, whatever order their keys
came in or however they were spaced: fingerprints decide whether a resubmission is
"the same intent" and hash chains must be recomputable by an auditor in any language.

Two canonical forms exist, specified byte for byte in docs/canonical-form.md:

- `jcs`, RFC 8785 (the JSON Canonicalization Scheme), which any language can reproduce:
  the hash chain of every event sealed since the form was introduced.
- `legacy-json`, Python's `json.dumps(sort_keys=True, ...)`: the chain of events sealed
  before, and every id and fingerprint (events/keys.py), whose vectors are frozen: changing
  their form would change every idempotency key a provider has already seen.
"""

import hashlib
import json
from typing import Any

import rfc8785

JCS = "jcs"
LEGACY = "legacy-json"
# What an envelope's `canon` may say; an envelope without `canon` is legacy-json.
SUPPORTED = frozenset({JCS, LEGACY})


class UnsupportedCanon(ValueError):
    """A canonical form this verifier does not know: the hash cannot be checked either way."""


def canonical_json(value: Any) -> bytes:
    """legacy-json: sorted keys, no insignificant whitespace, UTF-8, no NaN (not portable)."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def jcs(value: Any) -> bytes:
    """RFC 8785. Raises rfc8785.CanonicalizationError for what JSON numbers cannot hold
    exactly (an integer beyond 2**53, NaN, an infinity)."""
    return rfc8785.dumps(value)


def jcs_expressible(value: Any) -> bytes | None:
    """The JCS bytes of value, or None when JCS cannot hold it exactly."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        return None


def form_name(canon: str | None) -> str:
    """The form an envelope's `canon` field names (absent: the legacy form)."""
    return LEGACY if canon is None else canon


def canonical_bytes(canon: str | None, value: Any) -> bytes:
    """value in the canonical form an envelope names; UnsupportedCanon for another."""
    form = form_name(canon)
    if form == JCS:
        return jcs(value)
    if form == LEGACY:
        return canonical_json(value)
    raise UnsupportedCanon(f"canonical form {form!r} is not supported")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fingerprint(value: Any) -> str:
    return sha256_hex(canonical_json(value))
