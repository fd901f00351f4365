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

import orjson
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
    if _orjson_spells_jcs(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # a lone surrogate: rfc8785 words the problem
            pass
    return rfc8785.dumps(value)


# The pure-Python rfc8785 costs ~10x a walk and orjson (the decider seals every event).
# For a value made only of strings, booleans, null, integers within +-(2**53 - 1), lists
# and objects with ASCII names, orjson's sorted output IS the JCS output: integers are
# their digits in both; ASCII names sort the same by UTF-16 unit and by byte; both escape
# exactly ", \ and the code points below U+0020 (\b \f \n \r \t, else lowercase \u00xx)
# and write everything else as UTF-8; neither adds whitespace. Anything else (a float, a
# larger integer, a non-ASCII name) goes to rfc8785. tests/unit/test_canonical_vectors.py
# holds the two to the same bytes on generated values.
_SAFE = 2**53 - 1


def _orjson_spells_jcs(value: Any) -> bool:
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_SAFE <= value <= _SAFE)
    if kind is dict:
        return all(
            type(k) is str and k.isascii() and _orjson_spells_jcs(v) for k, v in value.items()
        )
    if kind is list:
        return all(_orjson_spells_jcs(v) for v in value)
    return False


def jcs_expressible(value: Any) -> bytes | None:
    """The JCS bytes of value, or None when JCS cannot hold it exactly."""
    try:
        return jcs(value)
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
