"""Webhook signatures, both schemes: the six acceptance cases, rotation and pinned vectors.

Given a body signed by a sender, when recon verifies it, then it is accepted with its delivery
id, or refused with the reason code the ingress turns into a 4xx.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from reconcilers.signatures import (
    MAX_DELIVERY_ID,
    InvalidSecretError,
    Scheme,
    SignatureError,
    SignatureErrorCode,
    Verified,
    sign_standard,
    sign_stripe,
    signed_headers,
    verify,
)

SECRET = "whsec_c2FuZGJveC1kZXYtc2VjcmV0"  # the sandbox's default (docs/contract.md)
OTHER_SECRET = "whsec_b3RoZXItc2VjcmV0LWtleQ=="
NOW = 1_700_000_000
EVENT_ID = "evt_0123"
BODY = json.dumps({"id": EVENT_ID, "type": "effect.succeeded", "data": {"effect": {}}}).encode()

Signer = Callable[[str, int, bytes], dict[str, str]]


def _standard(secret: str, timestamp: int, body: bytes) -> dict[str, str]:
    return sign_standard(secret, EVENT_ID, timestamp, body)


SIGNERS: dict[Scheme, Signer] = {Scheme.STANDARD: _standard, Scheme.STRIPE: sign_stripe}
SIGNATURE_HEADER = {Scheme.STANDARD: "webhook-signature", Scheme.STRIPE: "Stripe-Signature"}


@pytest.fixture(params=list(Scheme), ids=lambda s: s.value)
def scheme(request: pytest.FixtureRequest) -> Scheme:
    chosen: Scheme = request.param
    return chosen


def signed(scheme: Scheme, secret: str = SECRET, timestamp: int = NOW) -> dict[str, str]:
    return SIGNERS[scheme](secret, timestamp, BODY)


def refusal(
    scheme: Scheme, headers: dict[str, str], body: bytes = BODY, secrets: list[str] | None = None
) -> SignatureErrorCode:
    with pytest.raises(SignatureError) as caught:
        verify(scheme, headers, body, secrets or [SECRET], now=NOW)
    assert caught.value.message
    return caught.value.code


def with_extra_signature(scheme: Scheme, headers: dict[str, str], extra: str) -> dict[str, str]:
    """The same headers with `extra` (a signature made otherwise) listed first."""
    name = SIGNATURE_HEADER[scheme]
    other = SIGNERS[scheme](extra, NOW, BODY)[name]
    if scheme is Scheme.STANDARD:
        return {**headers, name: f"{other} {headers[name]}"}
    extra_v1 = other.split(",", 1)[1]
    t, v1 = headers[name].split(",", 1)
    return {**headers, name: f"{t},{extra_v1},v0=ignored,{v1}"}


# --- the six cases ---------------------------------------------------------------------------


def test_valid_signature_is_accepted_with_the_delivery_id(scheme: Scheme) -> None:
    assert verify(scheme, signed(scheme), BODY, [SECRET], now=NOW) == Verified(EVENT_ID, NOW)


def test_several_signatures_one_valid_is_accepted(scheme: Scheme) -> None:
    headers = with_extra_signature(scheme, signed(scheme), OTHER_SECRET)

    assert verify(scheme, headers, BODY, [SECRET], now=NOW).delivery_id == EVENT_ID


def test_tampered_body_is_refused(scheme: Scheme) -> None:
    tampered = BODY.replace(b"effect.succeeded", b"effect.refunded")

    assert refusal(scheme, signed(scheme), body=tampered) is SignatureErrorCode.BAD_SIGNATURE


def test_reserialised_body_is_refused(scheme: Scheme) -> None:
    # Same JSON value, other bytes: verification is on the raw body, never on parsed JSON.
    reserialised = json.dumps(json.loads(BODY), separators=(",", ":")).encode()
    assert reserialised != BODY

    assert refusal(scheme, signed(scheme), body=reserialised) is SignatureErrorCode.BAD_SIGNATURE


def test_wrong_secret_is_refused(scheme: Scheme) -> None:
    headers = signed(scheme, secret=OTHER_SECRET)

    assert refusal(scheme, headers) is SignatureErrorCode.BAD_SIGNATURE


@pytest.mark.parametrize("skew", [-301, 301, -86_400, 86_400], ids=lambda s: f"{s:+d}s")
def test_timestamp_outside_tolerance_is_refused_past_and_future(scheme: Scheme, skew: int) -> None:
    headers = signed(scheme, timestamp=NOW + skew)

    assert refusal(scheme, headers) is SignatureErrorCode.TIMESTAMP_OUT_OF_TOLERANCE


@pytest.mark.parametrize("skew", [-300, 300])
def test_timestamp_at_the_edge_of_tolerance_is_accepted(scheme: Scheme, skew: int) -> None:
    verified = verify(scheme, signed(scheme, timestamp=NOW + skew), BODY, [SECRET], now=NOW)
    assert verified.timestamp == NOW + skew


def test_tolerance_is_configurable(scheme: Scheme) -> None:
    headers = signed(scheme, timestamp=NOW - 60)
    with pytest.raises(SignatureError) as caught:
        verify(scheme, headers, BODY, [SECRET], now=NOW, tolerance_s=30)
    assert caught.value.code is SignatureErrorCode.TIMESTAMP_OUT_OF_TOLERANCE


def test_missing_headers_are_refused(scheme: Scheme) -> None:
    assert refusal(scheme, {}) is SignatureErrorCode.MISSING_HEADERS
    for name in signed(scheme):
        headers = {k: v for k, v in signed(scheme).items() if k != name}
        assert refusal(scheme, headers) is SignatureErrorCode.MISSING_HEADERS, name
        assert refusal(scheme, {**headers, name: "  "}) is SignatureErrorCode.MISSING_HEADERS


def test_other_schemes_headers_do_not_count(scheme: Scheme) -> None:
    other = Scheme.STRIPE if scheme is Scheme.STANDARD else Scheme.STANDARD
    assert refusal(scheme, signed(other)) is SignatureErrorCode.MISSING_HEADERS


# --- rotation, header handling, malformed input ----------------------------------------------


def test_rotated_secrets_accept_old_and_new(scheme: Scheme) -> None:
    secrets = [OTHER_SECRET, SECRET]  # the new secret first, the old one still listed

    for secret in secrets:
        verified = verify(scheme, signed(scheme, secret=secret), BODY, secrets, now=NOW)
        assert verified.delivery_id == EVENT_ID
    # Once the old secret is dropped, its signatures stop working.
    dropped = refusal(scheme, signed(scheme), secrets=[OTHER_SECRET])
    assert dropped is SignatureErrorCode.BAD_SIGNATURE


def test_header_names_are_case_insensitive(scheme: Scheme) -> None:
    upper = {k.upper(): v for k, v in signed(scheme).items()}
    assert verify(scheme, upper, BODY, [SECRET], now=NOW).delivery_id == EVENT_ID


@pytest.mark.parametrize("timestamp", ["soon", "-5", "+5", "1.5", "1_700_000_000", "\u0661\u0667"])
def test_unparseable_timestamp_is_a_bad_timestamp(scheme: Scheme, timestamp: str) -> None:
    headers = signed(scheme)
    if scheme is Scheme.STANDARD:
        headers["webhook-timestamp"] = timestamp
    else:
        v1 = headers["Stripe-Signature"].split(",", 1)[1]
        headers["Stripe-Signature"] = f"t={timestamp},{v1}"

    assert refusal(scheme, headers) is SignatureErrorCode.BAD_TIMESTAMP


@pytest.mark.parametrize("value", ["v1", "garbage", ",abc", "v1a,abc"])
def test_malformed_standard_signature_header(value: str) -> None:
    headers = {**signed(Scheme.STANDARD), "webhook-signature": value}
    assert refusal(Scheme.STANDARD, headers) is SignatureErrorCode.MALFORMED_SIGNATURE


@pytest.mark.parametrize(
    "value", ["garbage", f"t={NOW}", "v1=abc", f"t={NOW},v0=abc", f"t={NOW},t={NOW},v1=abc"]
)
def test_malformed_stripe_signature_header(value: str) -> None:
    headers = {"Stripe-Signature": value}
    assert refusal(Scheme.STRIPE, headers) is SignatureErrorCode.MALFORMED_SIGNATURE


def test_stripe_needs_an_event_id_in_the_signed_body() -> None:
    body = b'{"type": "effect.succeeded"}'
    headers = sign_stripe(SECRET, NOW, body)
    with pytest.raises(SignatureError) as caught:
        verify(Scheme.STRIPE, headers, body, [SECRET], now=NOW)
    assert caught.value.code is SignatureErrorCode.MISSING_DELIVERY_ID


def _with_id(scheme: Scheme, delivery_id: str) -> tuple[dict[str, str], bytes]:
    body = json.dumps({"id": delivery_id, "type": "effect.succeeded"}).encode()
    if scheme is Scheme.STANDARD:
        return sign_standard(SECRET, delivery_id, NOW, body), body
    return sign_stripe(SECRET, NOW, body), body


MALFORMED_IDS = {
    "too-long": "evt_" + "m" * (MAX_DELIVERY_ID - 3),
    "nul": "evt_\x00x",
    "line-break": "evt_\nx",
    "line-separator": "evt_\u2028x",
    "lone-surrogate": "evt_\ud800x",
}


@pytest.mark.parametrize(
    ("scheme", "case"),
    [
        (scheme, case)
        for scheme in Scheme
        for case in MALFORMED_IDS
        # A header's text cannot hold a lone surrogate: nothing could sign it.
        if not (scheme is Scheme.STANDARD and case == "lone-surrogate")
    ],
)
def test_a_delivery_id_that_is_not_printable_or_is_too_long_is_refused(
    scheme: Scheme, case: str
) -> None:
    # The id is a key of Postgres's index of handled deliveries: whatever it cannot store
    # or index is refused before anything is looked up. A Stripe id is JSON text, which can
    # escape any character.
    headers, body = _with_id(scheme, MALFORMED_IDS[case])
    assert refusal(scheme, headers, body) is SignatureErrorCode.MALFORMED_DELIVERY_ID


def test_the_longest_delivery_id_is_taken(scheme: Scheme) -> None:
    longest = "evt_" + "m" * (MAX_DELIVERY_ID - 4)
    headers, body = _with_id(scheme, longest)
    assert verify(scheme, headers, body, [SECRET], now=NOW).delivery_id == longest


def test_a_standard_secret_must_be_base64() -> None:
    with pytest.raises(InvalidSecretError):
        sign_standard("whsec_not base64!", EVENT_ID, NOW, BODY)
    with pytest.raises(InvalidSecretError):
        verify(Scheme.STANDARD, signed(Scheme.STANDARD), BODY, [], now=NOW)


# --- pinned vectors --------------------------------------------------------------------------


def test_standard_webhooks_published_vector() -> None:
    # The example from the Standard Webhooks reference libraries: proves interoperability, not
    # just agreement between our own signer and verifier.
    headers = sign_standard(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        b'{"test": 2432232314}',
    )
    assert headers["webhook-signature"] == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_pinned_vectors_for_the_sandbox_secret() -> None:
    # Frozen: a change here breaks every receiver configured with the sandbox's secret. The
    # Stripe digest was checked with `openssl dgst -sha256 -hmac <secret>`.
    body = b'{"id":"evt_1","type":"effect.succeeded"}'
    assert sign_standard(SECRET, "evt_1", 1_700_000_000, body) == {
        "webhook-id": "evt_1",
        "webhook-timestamp": "1700000000",
        "webhook-signature": "v1,BO3bv6/kcyPJFLk8ZDDK4yXmTZQE0HBjvXNEXXF/aFs=",
    }
    assert sign_stripe(SECRET, 1_700_000_000, body) == {
        "Stripe-Signature": "t=1700000000,"
        "v1=8f7025557437642f4b571db7309fc267285eb4126ab95c81d278a2af625a5bae"
    }


@pytest.mark.parametrize(
    "secret", ["whsec_c2FuZGJveC1kZXYtc2VjcmV0", "whsec_b3RoZXItc2VjcmV0LWtleQ"]
)
def test_a_standard_secret_without_base64_padding_signs_like_the_padded_one(secret: str) -> None:
    # "b3RoZXItc2VjcmV0LWtleQ" is OTHER_SECRET with its "==" dropped, as secrets are often
    # issued; the reference library accepts it, and so must we, with the same key.
    padded = secret + "=" * (-len(secret.removeprefix("whsec_")) % 4)
    headers = sign_standard(secret, EVENT_ID, NOW, BODY)
    assert headers == sign_standard(padded, EVENT_ID, NOW, BODY)
    assert verify(Scheme.STANDARD, headers, BODY, [padded], now=NOW).delivery_id == EVENT_ID


@pytest.mark.parametrize("secret", ["whsec_not base64!", "whsec_abcde", "whsec_ab=c", "whsec_"])
def test_a_standard_secret_that_is_not_base64_is_still_refused(secret: str) -> None:
    with pytest.raises(InvalidSecretError):
        sign_standard(secret, EVENT_ID, NOW, BODY)


def test_the_signed_headers_kept_as_evidence_are_the_schemes_own_as_received() -> None:
    body = b'{"id":"evt_1"}'
    standard = {**sign_standard(SECRET, "evt_1", 1_700_000_000, body), "Content-Type": "x"}
    kept = signed_headers(Scheme.STANDARD, {k.title(): v for k, v in standard.items()})
    assert set(kept) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert verify(Scheme.STANDARD, kept, body, [SECRET], now=1_700_000_000).delivery_id == "evt_1"
    stripe = {**sign_stripe(SECRET, 1_700_000_000, body), "user-agent": "x"}
    assert list(signed_headers(Scheme.STRIPE, stripe)) == ["stripe-signature"]
