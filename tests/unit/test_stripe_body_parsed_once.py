"""A Stripe delivery's body is parsed once: verifying reads its event id, and the adapter's
reader gets that same value for the same bytes (reconcilers.signatures.parsed_json), once;
any other body is parsed anew."""

import json
import time
from typing import Any

import pytest

from reconcilers.signatures import Scheme, parsed_json, sign_stripe, verify
from services.providers.stripe.webhooks import read_event

SECRET = "whsec_test"


def _event() -> bytes:
    intent = {"id": "pi_1", "object": "payment_intent", "status": "succeeded", "metadata": {}}
    return json.dumps(
        {"id": "evt_1", "type": "payment_intent.succeeded", "data": {"object": intent}}
    ).encode()


def test_a_stripe_body_is_parsed_once_and_read_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    body = _event()
    now = int(time.time())
    expected = read_event(bytes(body))  # parsed on its own
    calls: list[bytes] = []
    loads = json.loads

    def counted(raw: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(raw)
        return loads(raw, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counted)
    verified = verify(Scheme.STRIPE, sign_stripe(SECRET, now, body), body, [SECRET], now=now)

    assert verified.delivery_id == "evt_1"
    assert read_event(body) == expected
    assert len(calls) == 1
    # Handed over once: the next read of the same bytes parses them again.
    parsed_json(body)
    assert len(calls) == 2
