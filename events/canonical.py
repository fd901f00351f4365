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
    if _orjson_spells_both(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # a lone surrogate, a str subclass as a name:
            pass  # json.dumps decides
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def jcs(value: Any) -> bytes:
    """RFC 8785. Raises rfc8785.CanonicalizationError for what JSON numbers cannot hold
    exactly (an integer beyond 2**53, NaN, an infinity)."""
    if _orjson_spells_both(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # a lone surrogate (rfc8785 words the problem), or
            pass  # a str subclass as a name
    return rfc8785.dumps(value)


# The pure-Python rfc8785 costs ~10x a walk and orjson, json.dumps ~3x (the decider seals
# every event and derives its id). For a value made only of strings, booleans, null,
# integers within +-(2**53 - 1), lists and objects with ASCII names, orjson's sorted output
# IS the JCS output and the legacy-json output: integers are their digits in all three;
# ASCII names sort the same by UTF-16 unit, by code point and by byte; all three escape
# exactly ", \ and the code points below U+0020 (\b \f \n \r \t, else lowercase \u00xx)
# and write everything else as UTF-8; none adds whitespace. Anything else (a float, a
# larger integer, a non-ASCII name, a tuple, a subclass) goes to the reference, rfc8785
# or json.dumps. tests/unit/test_canonical_vectors.py holds the fast path to both
# references, byte for byte or refusal for refusal, on generated values.
_SAFE = 2**53 - 1


def _orjson_spells_both(value: Any) -> bool:
    # One loop over the containers, each child judged where it is met: a call per value (the
    # recursive form) cost the decider more than the rest of the canonical bytes.
    pending: list[Any] = [[value]]  # the value judged as the only child of a list
    while pending:
        container = pending.pop()
        if type(container) is dict:
            # join refuses a name that is not a string, and isascii judges all the names at
            # once (orjson refuses a str subclass's name itself: then rfc8785 spells it).
            try:
                if not "".join(container).isascii():
                    return False
            except TypeError:
                return False
            children = container.values()
        else:
            children = container
        for child in children:
            kind = type(child)
            if kind is str or kind is bool or child is None:
                continue
            if kind is int:
                if -_SAFE <= child <= _SAFE:
                    continue
                return False
            if kind is dict or kind is list:
                pending.append(child)
                continue
            return False
    return True


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
