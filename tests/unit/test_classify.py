"""What a provider's answer means: only the provider's refusal of the payload is `rejected`."""

import pytest

from events.inputs import Outcome
from services.providers.classify import classify_lookup, classify_response


@pytest.mark.parametrize(
    ("status", "error"),
    [(402, "card_declined"), (422, "out_of_stock"), (400, "invalid_request")],
)
def test_a_providers_refusal_of_the_payload_is_a_rejection(status: int, error: str) -> None:
    seen = classify_response(status, {"error": error})
    assert seen.outcome is Outcome.REJECTED
    assert seen.alarm is None


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (401, "invalid_api_key"),  # our credentials
        (403, "forbidden"),  # our credentials' rights
        (404, "not_found"),  # our route or base URL
        (405, "method_not_allowed"),
        (409, "idempotency_key_in_use"),  # another request under this key still running
        (410, "gone"),
        (413, "payload_too_large"),  # maybe a proxy in front: the provider never judged it
        (415, "unsupported_media_type"),
    ],
)
def test_a_4xx_about_our_side_is_unknown_and_raises_an_alarm(status: int, error: str) -> None:
    seen = classify_response(status, {"error": error})
    assert seen.outcome is Outcome.UNKNOWN
    assert seen.alarm is not None and str(status) in seen.alarm and error in seen.alarm
    # The evidence trail carries the reason too.
    assert seen.error == seen.alarm


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504])
def test_timing_answers_and_5xx_are_unknown_without_an_alarm(status: int) -> None:
    seen = classify_response(status, {"error": "try_later"})
    assert seen.outcome is Outcome.UNKNOWN
    assert seen.alarm is None


def test_a_reused_key_is_a_key_conflict_not_a_rejection() -> None:
    seen = classify_response(409, {"error": "idempotency_key_reused"})
    assert seen.outcome is Outcome.KEY_CONFLICT


def test_a_4xx_without_a_json_body_is_unknown() -> None:
    seen = classify_response(403, {"text": "<html>Forbidden</html>"})
    assert seen.outcome is Outcome.UNKNOWN
    assert seen.alarm is not None and "no error code" in seen.alarm


@pytest.mark.parametrize("status", [401, 403, 404])
def test_a_lookup_refused_for_our_side_is_unavailable_with_an_alarm(status: int) -> None:
    seen = classify_lookup(status, {"error": "nope"})
    assert seen.outcome is Outcome.UNAVAILABLE
    assert seen.alarm is not None


def test_a_lookup_that_is_only_slow_raises_no_alarm() -> None:
    assert classify_lookup(429, {}).alarm is None
    assert classify_lookup(503, {}).alarm is None
