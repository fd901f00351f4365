"""Webhook ingress against the real broker and database (docs/contract.md, "Webhooks").

The intake app runs in-process (httpx ASGITransport); what it produced is read back from
Kafka, what it remembered from Postgres. Only verified deliveries may produce anything.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import asyncpg
import httpx
import pytest
from support.delivery_rows import written
from support.intake_app import intake_client, settings_fixture
from support.topic_records import read_records

from events.drift import DriftDetected, DriftKind, drift_id
from events.inputs import OperationObserved, Outcome, Source, parse_input
from events.keys import partition_key
from reconcilers.signatures import Scheme, SignatureError, sign_standard, sign_stripe, verify
from services.config import Settings

OLD_SECRET = "whsec_b2xkLXNhbmRib3gtc2VjcmV0"  # still accepted during the rotation
NEW_SECRET = "whsec_bmV3LXNhbmRib3gtc2VjcmV0"
STRIPE_SECRET = "whsec_stripe-test-secret"
WRONG_SECRET = "whsec_d3Jvbmctc2VjcmV0"
OP_KEY = "rk1_" + "a" * 40
COMP_KEY = "rc1_" + "b" * 40
STRIPEY_KEY = "rk1_" + "c" * 40
PROVIDERS = {Scheme.STANDARD: "sandbox", Scheme.STRIPE: "stripey"}
# Each provider's operation, under its own key (a delivery settles only its provider's).
KEYS = {Scheme.STANDARD: OP_KEY, Scheme.STRIPE: STRIPEY_KEY}
TX_IDS = {Scheme.STANDARD: "order-1", Scheme.STRIPE: "order-s"}


settings = settings_fixture(
    webhook_secrets={"sandbox": (NEW_SECRET, OLD_SECRET), "stripey": (STRIPE_SECRET,)},
    webhook_schemes={"stripey": Scheme.STRIPE},
)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with intake_client(settings) as http:
        # An operation as the projector would have written it (the app applied the schema).
        conn = await asyncpg.connect(settings.database_url)
        try:
            await conn.execute(
                "INSERT INTO operations (tenant, tx_id, action, position, kind, provider,"
                " operation, op_key, state, attempts, evidence, updated_at, comp_op_key)"
                " VALUES ('acme', 'order-1', 'charge', 0, 'step', 'sandbox',"
                " 'payments.charge', $1, 'unknown', 1, '[]', now(), $2)",
                OP_KEY,
                COMP_KEY,
            )
            await conn.execute(
                "INSERT INTO operations (tenant, tx_id, action, position, kind, provider,"
                " operation, op_key, state, attempts, evidence, updated_at)"
                " VALUES ('acme', 'order-s', 'charge', 0, 'step', 'stripey',"
                " 'payments.charge', $1, 'unknown', 1, '[]', now())",
                STRIPEY_KEY,
            )
        finally:
            await conn.close()
        yield http


async def records(settings: Settings, topic: str) -> list[tuple[bytes, bytes]]:
    """Everything on `topic`: the ingress answers only after the ack, so it is all there."""
    return [
        (r.key or b"", r.value or b"")
        for r in await read_records(settings.kafka_bootstrap, topic, "read_uncommitted")
    ]


async def observations(settings: Settings) -> list[tuple[bytes, OperationObserved]]:
    found = []
    for key, value in await records(settings, settings.topics.observations):
        observed = parse_input(value)
        assert isinstance(observed, OperationObserved)
        found.append((key, observed))
    return found


def event_body(event_id: str, effect_id: str, key: str) -> bytes:
    effect = {
        "id": effect_id,
        "operation": "payments.charge",
        "idempotency_key": key,
        "payload": {"amount": 1299, "currency": "usd", "customer": "cus_1"},
        "metadata": {"op_key": key},
        "status": "succeeded",
        "created_at": "2026-01-01T00:00:00Z",
    }
    return json.dumps(
        {"id": event_id, "type": "effect.succeeded", "data": {"effect": effect}}
    ).encode()


def signed(
    scheme: Scheme, event_id: str, body: bytes, secret: str | None = None, at: int | None = None
) -> dict[str, str]:
    timestamp = int(time.time()) if at is None else at
    if scheme is Scheme.STANDARD:
        return sign_standard(secret or NEW_SECRET, event_id, timestamp, body)
    return sign_stripe(secret or STRIPE_SECRET, timestamp, body)


def with_decoy(scheme: Scheme, headers: dict[str, str]) -> dict[str, str]:
    """Several signatures, only the last of which is valid."""
    if scheme is Scheme.STANDARD:
        decoy = "v1," + "A" * 43 + "="
        return {**headers, "webhook-signature": f"{decoy} {headers['webhook-signature']}"}
    t, valid = headers["Stripe-Signature"].split(",")
    return {"Stripe-Signature": f"{t},v1={'0' * 64},{valid}"}


Case = Callable[[Scheme, str], tuple[dict[str, str], bytes]]


def _valid(scheme: Scheme, eid: str) -> tuple[dict[str, str], bytes]:
    body = event_body(eid, f"ch_{eid}", KEYS[scheme])
    return signed(scheme, eid, body), body


def _several_one_valid(scheme: Scheme, eid: str) -> tuple[dict[str, str], bytes]:
    body = event_body(eid, f"ch_{eid}", KEYS[scheme])
    # Standard: signed with the older of two rotated secrets.
    secret = OLD_SECRET if scheme is Scheme.STANDARD else None
    return with_decoy(scheme, signed(scheme, eid, body, secret)), body


def _tampered(scheme: Scheme, eid: str) -> tuple[dict[str, str], bytes]:
    body = event_body(eid, f"ch_{eid}", KEYS[scheme])
    return signed(scheme, eid, body), body.replace(b"1299", b"9999")


def _wrong_secret(scheme: Scheme, eid: str) -> tuple[dict[str, str], bytes]:
    body = event_body(eid, f"ch_{eid}", KEYS[scheme])
    return signed(scheme, eid, body, WRONG_SECRET), body


def _stale(scheme: Scheme, eid: str) -> tuple[dict[str, str], bytes]:
    body = event_body(eid, f"ch_{eid}", KEYS[scheme])
    return signed(scheme, eid, body, at=int(time.time()) - 301), body


def _missing_headers(scheme: Scheme, eid: str) -> tuple[dict[str, str], bytes]:
    body = event_body(eid, f"ch_{eid}", KEYS[scheme])
    headers = signed(scheme, eid, body)
    headers.pop("webhook-signature" if scheme is Scheme.STANDARD else "Stripe-Signature")
    return headers, body


CASES: list[tuple[str, Case, int, str | None]] = [
    ("valid", _valid, 200, None),
    ("several-one-valid", _several_one_valid, 200, None),
    ("tampered-body", _tampered, 401, "bad_signature"),
    ("wrong-secret", _wrong_secret, 401, "bad_signature"),
    ("stale-timestamp", _stale, 400, "timestamp_out_of_tolerance"),
    ("missing-headers", _missing_headers, 400, "missing_headers"),
]


@pytest.mark.parametrize("scheme", list(Scheme))
async def test_only_verified_deliveries_produce_an_observation(
    client: httpx.AsyncClient, settings: Settings, scheme: Scheme
) -> None:
    provider = PROVIDERS[scheme]
    for name, case, status, error in CASES:
        headers, body = case(scheme, f"evt_{name}")
        response = await client.post(
            f"/v1/webhooks/{provider}",
            content=body,
            headers={**headers, "content-type": "application/json"},
        )
        assert response.status_code == status, (name, response.text)
        if error is not None:
            assert response.json()["error"] == error, name
            assert response.json()["message"], name
        else:
            assert response.json() == {"status": "accepted"}, name

    produced = await observations(settings)

    assert sorted(o.message_id for _, o in produced) == [
        f"webhook:{provider}:evt_several-one-valid",
        f"webhook:{provider}:evt_valid",
    ]
    key, first = next((k, o) for k, o in produced if o.message_id.endswith("evt_valid"))
    assert key == partition_key("acme", TX_IDS[scheme])
    assert (first.tenant, first.tx_id, first.action, first.op_key) == (
        "acme",
        TX_IDS[scheme],
        "charge",
        KEYS[scheme],
    )
    assert (first.attempt, first.source, first.outcome) == (0, Source.WEBHOOK, Outcome.SUCCEEDED)
    assert first.remote_id == "ch_evt_valid" and first.body["idempotency_key"] == KEYS[scheme]
    # The delivery as received rides on its observation (an auditor's evidence): its
    # headers and raw body verify again under the account's secret, and only under it.
    delivery = first.delivery
    assert delivery is not None and delivery.scheme == scheme.value
    raw = base64.b64decode(delivery.body_base64)
    assert raw == _valid(scheme, "evt_valid")[1]
    secret = STRIPE_SECRET if scheme is Scheme.STRIPE else NEW_SECRET
    again = verify(scheme, delivery.headers, raw, (secret,), now=int(time.time()), tolerance_s=300)
    assert again.delivery_id == "evt_valid"
    with pytest.raises(SignatureError):
        verify(scheme, delivery.headers, raw, (WRONG_SECRET,), now=int(time.time()))
    assert await records(settings, settings.topics.drift) == []
    await written(
        settings.database_url, [(provider, "evt_several-one-valid"), (provider, "evt_valid")]
    )


# Ids no provider sends, each signed: one past the longest taken, and for Stripe (whose id is
# the body's JSON text) a NUL, a lone surrogate and a line break.
MALFORMED_IDS = {
    Scheme.STANDARD: ["evt_" + "m" * 252],
    Scheme.STRIPE: ["evt_" + "m" * 252, r"evt_\u0000", r"evt_\ud800", r"evt_\n"],
}


@pytest.mark.parametrize("scheme", list(Scheme))
async def test_a_malformed_delivery_id_is_refused_and_fails_no_other_delivery(
    client: httpx.AsyncClient, settings: Settings, scheme: Scheme
) -> None:
    # Sent at once with a valid delivery, so they share its statements: until stop 60 a
    # Stripe id holding a NUL failed every delivery of its statement (422), one holding a lone
    # surrogate failed them all with a 500, and a signed id too long for the index was
    # produced, then failed its record (500) at each of the provider's retries.
    provider = PROVIDERS[scheme]
    sent = [_valid(scheme, "evt_fine")]
    for n, eid in enumerate(MALFORMED_IDS[scheme]):
        body = event_body("@", f"ch_odd{n}", KEYS[scheme]).replace(b'"@"', f'"{eid}"'.encode())
        sent.append((signed(scheme, json.loads(f'"{eid}"'), body), body))

    answers = await asyncio.gather(
        *(client.post(f"/v1/webhooks/{provider}", content=b, headers=h) for h, b in sent)
    )

    assert (answers[0].status_code, answers[0].json()) == (200, {"status": "accepted"})
    for answer in answers[1:]:
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == "malformed_delivery_id"
    assert [o.message_id for _, o in await observations(settings)] == [
        f"webhook:{provider}:evt_fine"
    ]
    await written(settings.database_url, [(provider, "evt_fine")])


async def test_a_delivery_sent_three_times_and_after_a_restart_is_observed_once(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    body = event_body("evt_1", "ch_1", OP_KEY)
    answers = []
    for _ in range(3):
        # Re-signed each time, as a provider's redelivery is: same id, fresh timestamp.
        response = await client.post(
            "/v1/webhooks/sandbox", content=body, headers=signed(Scheme.STANDARD, "evt_1", body)
        )
        answers.append((response.status_code, response.json()["status"]))
    # Recorded (by the intake's next check, or within its bound) before the restart.
    await written(settings.database_url, [("sandbox", "evt_1")])

    async with intake_client(settings) as restarted:
        again = await restarted.post(
            "/v1/webhooks/sandbox", content=body, headers=signed(Scheme.STANDARD, "evt_1", body)
        )

    assert answers == [(200, "accepted"), (200, "duplicate"), (200, "duplicate")]
    assert (again.status_code, again.json()["status"]) == (200, "duplicate")
    assert [o.message_id for _, o in await observations(settings)] == ["webhook:sandbox:evt_1"]


async def test_an_effect_of_the_undo_is_observed_on_the_compensation_leg(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    body = event_body("evt_refund", "re_1", COMP_KEY)
    response = await client.post(
        "/v1/webhooks/sandbox", content=body, headers=signed(Scheme.STANDARD, "evt_refund", body)
    )

    assert response.status_code == 200
    [(_, observed)] = await observations(settings)
    assert (observed.action, observed.op_key, observed.remote_id) == ("charge", COMP_KEY, "re_1")


async def test_an_intent_not_projected_yet_is_found_in_the_intake_rows(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    submitted = await client.post(
        "/v1/transactions",
        headers={"Authorization": "Bearer key-acme"},
        json={
            "tx_id": "order-2",
            "agent_id": "agent-7",
            "steps": [
                {
                    "action": "charge",
                    "provider": "sandbox",
                    "operation": "payments.charge",
                    "payload": {"amount": 1, "currency": "usd", "customer": "cus_1"},
                }
            ],
        },
    )
    key = submitted.json()["operations"][0]["op_key"]
    body = event_body("evt_early", "ch_early", key)

    response = await client.post(
        "/v1/webhooks/sandbox", content=body, headers=signed(Scheme.STANDARD, "evt_early", body)
    )

    assert response.status_code == 200
    [(_, observed)] = await observations(settings)
    assert (observed.tx_id, observed.action, observed.op_key) == ("order-2", "charge", key)


async def test_an_effect_nobody_intended_is_reported_as_drift_once(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    stranger = "rk1_" + "f" * 40
    for event_id in ("evt_x1", "evt_x1", "evt_x2"):  # a duplicate, then a second event
        body = event_body(event_id, "ch_stranger", stranger)
        response = await client.post(
            "/v1/webhooks/sandbox", content=body, headers=signed(Scheme.STANDARD, event_id, body)
        )
        assert response.status_code == 200

    reports = [
        (key, DriftDetected.model_validate_json(value))
        for key, value in await records(settings, settings.topics.drift)
    ]

    expected = drift_id(DriftKind.EFFECT_WITHOUT_INTENT, "sandbox", "ch_stranger")
    # The second event about the same stray finds its drift reported by the first
    # (reconciler_drift_reported, the drift scan's filter) and produces nothing.
    assert [(key, r.drift_id) for key, r in reports] == [(expected.encode(), expected)]
    report = reports[0][1]
    assert (report.kind, report.provider, report.effect_id, report.tenant) == (
        DriftKind.EFFECT_WITHOUT_INTENT,
        "sandbox",
        "ch_stranger",
        None,
    )
    assert report.detail["effect"]["idempotency_key"] == stranger
    assert datetime.fromisoformat(report.detected_at) <= datetime.now(UTC)
    assert await observations(settings) == []


async def test_unknown_provider_and_unsigned_garbage_change_nothing(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    body = event_body("evt_1", "ch_1", OP_KEY)
    unknown = await client.post(
        "/v1/webhooks/nobody", content=body, headers=signed(Scheme.STANDARD, "evt_1", body)
    )
    garbage = b"not json"
    unparsable = await client.post(
        "/v1/webhooks/sandbox",
        content=garbage,
        headers=signed(Scheme.STANDARD, "evt_garbage", garbage),
    )

    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_provider"
    assert unparsable.status_code == 400 and unparsable.json()["error"] == "invalid_webhook"
    assert await observations(settings) == []
    assert await records(settings, settings.topics.drift) == []


async def test_a_webhook_with_a_lone_surrogate_or_nul_is_recorded_escaped_not_refused(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    # Valid JSON that json.loads takes, but whose text cannot be encoded again (a lone
    # surrogate) or stored in Postgres (NUL): once as a matched effect, once as drift.
    matched = event_body("evt_odd", "ch_odd", OP_KEY).replace(
        b'"customer": "cus_1"', b'"customer": "cus_\\ud800\\u0000"'
    )
    unmatched = event_body("evt_odd_drift", "ch_odd\\ud800", "rk1_nobody")
    for event_id, body in (("evt_odd", matched), ("evt_odd_drift", unmatched)):
        response = await client.post(
            "/v1/webhooks/sandbox",
            content=body,
            headers={**signed(Scheme.STANDARD, event_id, body), "content-type": "application/json"},
        )
        assert response.status_code == 200, response.text
        assert response.json() == {"status": "accepted"}

    [(_, observed)] = await observations(settings)
    assert observed.body["payload"]["customer"] == "cus_\\ud800\\u0000"
    [(_, raw)] = await records(settings, settings.topics.drift)
    drift = DriftDetected.model_validate_json(raw)
    assert drift.effect_id == "ch_odd\\ud800"


def _with_effect(event_id: str, effect_id: str, key: str, meta_key: str) -> bytes:
    event = json.loads(event_body(event_id, effect_id, key))
    event["data"]["effect"]["metadata"] = {"op_key": meta_key}
    return json.dumps(event).encode()


async def test_metadata_naming_an_operation_never_matches_it_and_a_disagreement_is_drift(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    # Given an effect someone else created at the shared provider under their own key,
    # with acme's op key written into its metadata (issue 18, item 13)
    spoof = _with_effect("evt_spoof", "ch_spoof", "their-own-key", OP_KEY)
    # and an effect under acme's key whose metadata names another operation
    odd = _with_effect("evt_odd", "ch_odd", OP_KEY, "rk1_" + "c" * 40)
    for event_id, body in (("evt_spoof", spoof), ("evt_odd", odd)):
        response = await client.post(
            "/v1/webhooks/sandbox", content=body, headers=signed(Scheme.STANDARD, event_id, body)
        )
        assert response.status_code == 200, response.text

    # Then neither confirms acme's operation
    assert await observations(settings) == []
    reports = {
        DriftDetected.model_validate_json(value).effect_id: DriftDetected.model_validate_json(value)
        for _, value in await records(settings, settings.topics.drift)
    }
    # the spoof is an effect nobody intended (no tenant: it is not acme's)
    assert (reports["ch_spoof"].kind, reports["ch_spoof"].tenant) == (
        DriftKind.EFFECT_WITHOUT_INTENT,
        None,
    )
    # the disagreement is acme's mismatch drift, naming both keys
    assert (reports["ch_odd"].kind, reports["ch_odd"].tenant, reports["ch_odd"].op_key) == (
        DriftKind.MISMATCH,
        "acme",
        OP_KEY,
    )
    assert reports["ch_odd"].detail["metadata_op_key"] == {
        "recon": OP_KEY,
        "provider": "rk1_" + "c" * 40,
    }


async def test_a_delivery_signed_for_one_provider_never_settles_another_providers_operation(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    # Signed with stripey's secret, naming the key of acme's charge at the sandbox.
    body = event_body("evt_cross", "ch_cross", OP_KEY)
    response = await client.post(
        "/v1/webhooks/stripey", content=body, headers=signed(Scheme.STRIPE, "evt_cross", body)
    )

    assert (response.status_code, response.json()["status"]) == (200, "accepted")
    assert await observations(settings) == []
    [(_, value)] = await records(settings, settings.topics.drift)
    report = DriftDetected.model_validate_json(value)
    assert (report.kind, report.provider, report.tenant) == (
        DriftKind.EFFECT_WITHOUT_INTENT,
        "stripey",
        None,
    )
