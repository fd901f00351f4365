"""Webhook signature schemes: signing (the sandbox provider) and verification (recon's ingress).

Both sides import this one module so the two can never disagree about a scheme. Pure: no I/O,
no clock (`now` and `timestamp` are parameters), no randomness.

- Standard Webhooks (https://www.standardwebhooks.com): `webhook-id`, `webhook-timestamp`
  (unix seconds) and `webhook-signature`, a space-separated list of `v1,<base64 HMAC-SHA256 of
  "{id}.{timestamp}.{body}">`. The secret reads `whsec_<base64 key>`; the key is the decoded part.
- Stripe: `Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "{t}.{body}">[,v1=...]`.
  Stripe uses its `whsec_...` secret string verbatim (UTF-8) as the key, not base64-decoded.

Verification always works on the raw body bytes: re-serialising parsed JSON changes the bytes
and breaks the signature.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from events.str_enum import StrEnum

STANDARD_SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE_S = 300

WEBHOOK_ID = "webhook-id"
WEBHOOK_TIMESTAMP = "webhook-timestamp"
WEBHOOK_SIGNATURE = "webhook-signature"
STRIPE_SIGNATURE = "stripe-signature"

# Unix seconds as plain ASCII digits: `int()` alone would also take "+5", " 5", "1_0" and
# non-ASCII digits, none of which a sender produces.
_TIMESTAMP = re.compile(r"[0-9]{1,12}")


class Scheme(StrEnum):
    STANDARD = "standard"
    STRIPE = "stripe"


class SignatureErrorCode(StrEnum):
    MISSING_HEADERS = "missing_headers"
    BAD_TIMESTAMP = "bad_timestamp"
    TIMESTAMP_OUT_OF_TOLERANCE = "timestamp_out_of_tolerance"
    BAD_SIGNATURE = "bad_signature"
    MALFORMED_SIGNATURE = "malformed_signature"
    # Stripe only: the delivery id comes from the body's `id`, which must be there.
    MISSING_DELIVERY_ID = "missing_delivery_id"
    # A delivery id that is not 1 to MAX_DELIVERY_ID printable characters.
    MALFORMED_DELIVERY_ID = "malformed_delivery_id"


# The longest delivery id taken. Providers' ids are a few tens of characters (Standard
# Webhooks' `msg_...`, Stripe's `evt_...`); the id is a key of Postgres's index of handled
# deliveries, which holds at most ~2.7 KB per entry: an id past that failed its record after
# its observation was produced, at every retry of the provider's.
MAX_DELIVERY_ID = 255


class SignatureError(Exception):
    """A delivery that must be refused (4xx, no state change); `code` is machine-readable."""

    def __init__(self, code: SignatureErrorCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message


class InvalidSecretError(ValueError):
    """A configured secret this scheme cannot use: a configuration error, found at start-up."""


@dataclass(frozen=True)
class Verified:
    # What deduplication keys on: `webhook-id`, or the event id for Stripe (it has no id header).
    delivery_id: str
    timestamp: int


# Cached: the ingress verifies every delivery against the configured secrets, which are few
# and never change while it runs (a bad one raises, and raising is never cached).
@lru_cache(maxsize=64)
def standard_key(secret: str) -> bytes:
    """The HMAC key a Standard Webhooks secret stands for (`whsec_` prefix optional)."""
    encoded = secret.removeprefix(STANDARD_SECRET_PREFIX)
    # Secrets are often handed out without their base64 padding, and the Standard Webhooks
    # reference library accepts them: pad to a multiple of 4 before the strict decode, which
    # still refuses anything that is not base64 (wrong alphabet, a stray length of 4n + 1).
    if not encoded.endswith("="):
        encoded += "=" * (-len(encoded) % 4)
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidSecretError(
            f"A Standard Webhooks secret must read {STANDARD_SECRET_PREFIX}<base64 key>; "
            f"the part after the prefix is not valid base64 ({exc})."
        ) from exc
    if not key:
        raise InvalidSecretError("A Standard Webhooks secret must not be empty.")
    return key


def stripe_key(secret: str) -> bytes:
    if not secret:
        raise InvalidSecretError("A Stripe webhook secret must not be empty.")
    return secret.encode("utf-8")


def key_for(scheme: Scheme, secret: str) -> bytes:
    """Validates `secret` for `scheme`; call it on configuration to fail at start-up."""
    return standard_key(secret) if scheme is Scheme.STANDARD else stripe_key(secret)


def _standard_digest(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    # hmac.digest: the same MAC as hmac.new(...).digest(), in one call into OpenSSL.
    return base64.b64encode(hmac.digest(key, signed, "sha256")).decode("ascii")


def _stripe_digest(key: bytes, timestamp: int, body: bytes) -> str:
    signed = f"{timestamp}.".encode() + body
    return hmac.digest(key, signed, "sha256").hex()


def sign_standard(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The Standard Webhooks headers for one delivery attempt."""
    digest = _standard_digest(standard_key(secret), msg_id, timestamp, body)
    return {
        WEBHOOK_ID: msg_id,
        WEBHOOK_TIMESTAMP: str(timestamp),
        WEBHOOK_SIGNATURE: f"v1,{digest}",
    }


def sign_stripe(secret: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The `Stripe-Signature` header for one delivery attempt."""
    digest = _stripe_digest(stripe_key(secret), timestamp, body)
    return {"Stripe-Signature": f"t={timestamp},v1={digest}"}


def verify(
    scheme: Scheme,
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[str],
    now: int,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
) -> Verified:
    """Check one delivery; return its id and timestamp or raise `SignatureError`.

    `secrets` lists every secret currently accepted (rotation: the new one and the old one until
    the provider has switched); a signature made with any of them is accepted.

    The signature is checked before the timestamp's age, so that a sender without the secret
    learns only `bad_signature`, while `timestamp_out_of_tolerance` reliably means "a genuine
    delivery, refused for its age" (a replay, or clocks apart): something an operator can act on.
    """
    if not secrets:
        raise InvalidSecretError("verify() needs at least one secret.")
    lowered = {name.lower(): value for name, value in headers.items()}
    if scheme is Scheme.STANDARD:
        verified = _verify_standard(lowered, body, secrets)
    else:
        verified = _verify_stripe(lowered, body, secrets)
    _check_tolerance(verified.timestamp, now, tolerance_s)
    _check_delivery_id(verified.delivery_id)
    return verified


def signed_headers(scheme: Scheme, headers: Mapping[str, str]) -> dict[str, str]:
    """The headers a verified delivery's signature is in, names lowercased, values as
    received: what an auditor needs beside the raw body to check it again."""
    names: tuple[str, ...] = (WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE)
    if scheme is Scheme.STRIPE:
        names = (STRIPE_SIGNATURE,)
    lowered = {name.lower(): value for name, value in headers.items()}
    return {name: lowered[name] for name in names if name in lowered}


def _require(headers: Mapping[str, str], names: Sequence[str]) -> list[str]:
    missing = [name for name in names if not headers.get(name, "").strip()]
    if missing:
        raise SignatureError(
            SignatureErrorCode.MISSING_HEADERS,
            f"Missing header(s) {', '.join(missing)}; a signed delivery carries all of "
            f"{', '.join(names)}.",
        )
    return [headers[name].strip() for name in names]


def _parse_timestamp(raw: str) -> int:
    if not _TIMESTAMP.fullmatch(raw):
        raise SignatureError(
            SignatureErrorCode.BAD_TIMESTAMP,
            f"The signature timestamp {raw[:32]!r} is not a unix time in seconds.",
        )
    return int(raw)


def _check_tolerance(timestamp: int, now: int, tolerance_s: int) -> None:
    # Both directions: a timestamp far in the future would otherwise stay "fresh" for as long
    # as the attacker likes, defeating the replay window.
    if abs(now - timestamp) > tolerance_s:
        direction = "old" if timestamp < now else "far in the future"
        raise SignatureError(
            SignatureErrorCode.TIMESTAMP_OUT_OF_TOLERANCE,
            f"The delivery's timestamp {timestamp} is {abs(now - timestamp)} s {direction} "
            f"(tolerance {tolerance_s} s); refused as a possible replay. Check both clocks.",
        )


def _check_delivery_id(delivery_id: str) -> None:
    # Printable: no NUL, control character or lone surrogate (a Stripe id is JSON text, which
    # may escape any of them), none of which Postgres can store or asyncpg send.
    if len(delivery_id) > MAX_DELIVERY_ID or not delivery_id.isprintable():
        raise SignatureError(
            SignatureErrorCode.MALFORMED_DELIVERY_ID,
            f"The delivery id {delivery_id[:40]!r} ({len(delivery_id)} characters) is not 1 to "
            f"{MAX_DELIVERY_ID} printable characters.",
        )


def _any_matches(expected: Sequence[str], candidates: Sequence[str]) -> bool:
    # Every pair is compared, in constant time each, with no early exit: how many comparisons
    # ran must not reveal which secret or which candidate came close.
    matched = False
    for want in expected:
        for got in candidates:
            matched |= hmac.compare_digest(want.encode("ascii"), got.encode("utf-8"))
    return matched


def _no_match(scheme: Scheme, count: int, secrets: int) -> SignatureError:
    return SignatureError(
        SignatureErrorCode.BAD_SIGNATURE,
        f"None of the {count} {scheme.value} signature(s) matches any of the {secrets} "
        "configured secret(s) over the raw body; check the secret, and that the body reached "
        "us unmodified.",
    )


def _verify_standard(headers: Mapping[str, str], body: bytes, secrets: Sequence[str]) -> Verified:
    msg_id, raw_timestamp, raw_signatures = _require(
        headers, (WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE)
    )
    candidates: list[str] = []
    for token in raw_signatures.split():
        version, comma, signature = token.partition(",")
        if not comma or not version or not signature:
            raise SignatureError(
                SignatureErrorCode.MALFORMED_SIGNATURE,
                f"webhook-signature entry {token[:40]!r} is not '<version>,<signature>'.",
            )
        # Other versions (v1a, asymmetric) may sit beside v1; only v1 is ours to check.
        if version == "v1":
            candidates.append(signature)
    if not candidates:
        raise SignatureError(
            SignatureErrorCode.MALFORMED_SIGNATURE,
            "webhook-signature carries no v1 signature.",
        )
    timestamp = _parse_timestamp(raw_timestamp)
    expected = [
        _standard_digest(standard_key(secret), msg_id, timestamp, body) for secret in secrets
    ]
    if not _any_matches(expected, candidates):
        raise _no_match(Scheme.STANDARD, len(candidates), len(secrets))
    return Verified(delivery_id=msg_id, timestamp=timestamp)


def _verify_stripe(headers: Mapping[str, str], body: bytes, secrets: Sequence[str]) -> Verified:
    [raw_header] = _require(headers, (STRIPE_SIGNATURE,))
    timestamps: list[str] = []
    candidates: list[str] = []
    for item in raw_header.split(","):
        name, equals, value = item.strip().partition("=")
        if not equals or not name or not value:
            raise SignatureError(
                SignatureErrorCode.MALFORMED_SIGNATURE,
                f"Stripe-Signature item {item[:40]!r} is not '<scheme>=<value>'.",
            )
        if name == "t":
            timestamps.append(value)
        elif name == "v1":
            candidates.append(value)
        # Anything else (v0, Stripe's test-mode scheme) is ignored, as Stripe's libraries do.
    if len(timestamps) != 1 or not candidates:
        raise SignatureError(
            SignatureErrorCode.MALFORMED_SIGNATURE,
            "Stripe-Signature needs exactly one t=<timestamp> and at least one v1=<signature>.",
        )
    timestamp = _parse_timestamp(timestamps[0])
    expected = [_stripe_digest(stripe_key(secret), timestamp, body) for secret in secrets]
    if not _any_matches(expected, candidates):
        raise _no_match(Scheme.STRIPE, len(candidates), len(secrets))
    return Verified(delivery_id=_stripe_event_id(body), timestamp=timestamp)


def _stripe_event_id(body: bytes) -> str:
    # Parsed only after the signature holds: unauthenticated bytes are never interpreted.
    global _parsed
    try:
        event = json.loads(body)
        _parsed = (body, event)
    except ValueError:
        event = None
    event_id = event.get("id") if isinstance(event, dict) else None
    if not isinstance(event_id, str) or not event_id:
        raise SignatureError(
            SignatureErrorCode.MISSING_DELIVERY_ID,
            "A Stripe-signed body must be a JSON object with a string 'id' (the event id), "
            "which deduplication keys on.",
        )
    return event_id


# The value the last Stripe delivery's body was parsed to for its event id, kept for the
# adapter's reader, which reads the same bytes object of that delivery next with nothing
# awaited in between (services.intake.webhooks): handed over once, so a body is parsed once.
_parsed: tuple[bytes, Any] | None = None


def parsed_json(body: bytes) -> Any:
    """json.loads(body), or the value `_stripe_event_id` parsed this same body object to
    (handed over once)."""
    global _parsed
    kept, _parsed = _parsed, None
    if kept is not None and kept[0] is body:
        return kept[1]
    return json.loads(body)
