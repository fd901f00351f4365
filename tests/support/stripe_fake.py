"""A stateful fake of the slice of Stripe's API the Stripe adapter speaks, for the
semantics stripe-mock (stateless, it ignores keys) cannot show: Stripe's idempotency rules
(https://docs.stripe.com/api/idempotent_requests).

- A key's first answer is saved and replayed for the same parameters
  (`Idempotent-Replayed: true`), 402 declines and 400s of an object's state included; a
  400 that failed validation (`parameter_missing`) is not saved, as Stripe does not.
- The same key with other parameters: `400 idempotency_error`.
- The same key while its first request is still running: `409`.
- A key older than `retention_s` on the fake's clock is pruned: a resend is new.

The fake runs in the test's process and loop (`running_fake`), so a test moves its clock
and slows its requests directly. FastAPI, as the sandbox provider is.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from support.local_server import serving

API_KEY = "sk_test_fake"
RETENTION_S = 24 * 3600.0
DECLINED = "pm_card_chargeDeclined"
# Stripe saves a key's first answer once the endpoint began to execute: a request whose
# parameters failed validation saves nothing, and its resend is judged again; a 400 the
# endpoint gave from the state it found (a refund of an intent never charged, a confirm
# of an intent past it) is saved and replayed like a decline. The fake gives that code
# to its validation failures alone.
PARAMETERS_REFUSED = "parameter_missing"
_FIELD = re.compile(r"^([^\[]+)\[([^\]]*)\]$")
_SEARCH = re.compile(r"^metadata\['op_key'\]:'((?:[^'\\]|\\.)*)'$")


class FakeClock:
    def __init__(self) -> None:
        self.offset = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


@dataclass
class Saved:
    fingerprint: tuple[str, str, tuple[tuple[str, str], ...]]
    at: datetime
    answer: tuple[int, dict[str, Any]] | None = None  # None: still running


@dataclass
class StripeFake:
    clock: FakeClock = field(default_factory=FakeClock)
    # How long each POST takes before it answers: the window a concurrent request under
    # the same key meets the first one in flight.
    hold_s: float = 0.0
    keys: dict[str, Saved] = field(default_factory=dict)
    intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    refunds: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The payment methods declined now: a card declined until it is funded (the contract
    # kit lifts a decline to see that the declined key is still answered with it).
    declining: set[str] = field(default_factory=lambda: {DECLINED})
    # Each intent a confirm made succeed, and the confirm's idempotency key (a confirm
    # carries no metadata: this is the fake's own view of what a key made).
    confirmed_under: dict[str, str | None] = field(default_factory=dict)
    # Every POST that ran (not replayed, not refused for its key): what "one effect per
    # key" is counted against.
    executed: int = 0
    # Answers replayed from a saved key (the `replay` lookup's evidence).
    replayed: int = 0
    # Every request that reached the fake, of any kind: what "nothing was sent" counts.
    requests: int = 0
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_fake{next(self.ids):06d}"


def _error(status: int, kind: str, message: str, **extra: Any) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"type": kind, "message": message, **extra}}


def _missing() -> tuple[int, dict[str, Any]]:
    return _error(404, "invalid_request_error", "No such payment_intent", code="resource_missing")


def _form(raw: bytes) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name, value in parse_qsl(raw.decode(), keep_blank_values=True):
        nested = _FIELD.match(name)
        if nested:
            params.setdefault(nested.group(1), {})[nested.group(2)] = value
        else:
            params[name] = value
    return params


def create_app(fake: StripeFake) -> FastAPI:
    app = FastAPI()

    @app.middleware("http")
    async def authenticate(request: Request, call_next: Any) -> Any:
        fake.requests += 1
        if request.headers.get("authorization") != f"Bearer {API_KEY}":
            status, body = _error(401, "invalid_request_error", "Invalid API Key provided")
            return JSONResponse(body, status_code=status)
        return await call_next(request)

    async def idempotent(request: Request, run: Any) -> JSONResponse:
        raw = await request.body()
        key = request.headers.get("idempotency-key")
        fingerprint = (request.method, request.url.path, tuple(sorted(parse_qsl(raw.decode()))))
        now = fake.clock()
        saved = fake.keys.get(key) if key else None
        if saved is not None and (now - saved.at).total_seconds() > RETENTION_S:
            del fake.keys[key or ""]  # pruned: the key is new again
            saved = None
        if saved is not None:
            if saved.fingerprint != fingerprint:
                status, body = _error(
                    400,
                    "idempotency_error",
                    "Keys for idempotent requests can only be used with the same parameters "
                    "they were first used with.",
                )
                return JSONResponse(body, status_code=status)
            if saved.answer is None:
                status, body = _error(
                    409,
                    "idempotency_error",
                    "There is currently another in-progress request using this "
                    "Idempotency-Key; try again later.",
                )
                return JSONResponse(body, status_code=status)
            status, body = saved.answer
            fake.replayed += 1
            return JSONResponse(body, status_code=status, headers={"Idempotent-Replayed": "true"})
        if key:
            saved = fake.keys[key] = Saved(fingerprint, now)
        if fake.hold_s:
            await asyncio.sleep(fake.hold_s)
        fake.executed += 1
        status, body = run(_form(raw))
        if saved is not None:
            if status == 400 and body["error"].get("code") == PARAMETERS_REFUSED:
                del fake.keys[key or ""]  # failed validation: Stripe saves no result
            else:
                saved.answer = (status, body)
        return JSONResponse(body, status_code=status)

    def create_intent(params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not str(params.get("amount", "")).isdigit() or not params.get("currency"):
            return _error(
                400,
                "invalid_request_error",
                "amount and currency are required",
                code=PARAMETERS_REFUSED,
            )
        intent = {
            "id": fake.new_id("pi"),
            "object": "payment_intent",
            "amount": int(params["amount"]),
            "amount_received": 0,
            "currency": params["currency"],
            "status": "requires_payment_method",
            "payment_method": params.get("payment_method"),
            "metadata": params.get("metadata", {}),
            "created": int(fake.clock().timestamp()),
            "refunded": 0,
        }
        if intent["payment_method"]:
            intent["status"] = "requires_confirmation"
        fake.intents[str(intent["id"])] = intent
        return 200, _shown(intent)

    def confirm(
        intent_id: str, params: dict[str, Any], key: str | None
    ) -> tuple[int, dict[str, Any]]:
        intent = fake.intents.get(intent_id)
        if intent is None:
            return _error(
                404, "invalid_request_error", "No such payment_intent", code="resource_missing"
            )
        method = params.get("payment_method") or intent["payment_method"]
        if intent["status"] not in ("requires_confirmation", "requires_payment_method"):
            return _error(400, "invalid_request_error", f"intent is {intent['status']}")
        if method in fake.declining:
            intent["status"] = "requires_payment_method"
            return _error(402, "card_error", "Your card was declined.", code="card_declined")
        if not method:
            return _error(400, "invalid_request_error", "a payment method is required")
        intent.update(status="succeeded", amount_received=intent["amount"], payment_method=method)
        fake.confirmed_under[intent_id] = key
        return 200, _shown(intent)

    def cancel(intent_id: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        intent = fake.intents.get(intent_id)
        if intent is None:
            return _error(
                404, "invalid_request_error", "No such payment_intent", code="resource_missing"
            )
        if intent["status"] in ("succeeded", "canceled"):
            return _error(400, "invalid_request_error", f"intent is {intent['status']}")
        intent["status"] = "canceled"
        return 200, _shown(intent)

    def refund(params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        intent = fake.intents.get(str(params.get("payment_intent")))
        if intent is None or intent["status"] != "succeeded":
            return _error(400, "invalid_request_error", "the intent has no successful charge")
        left = intent["amount_received"] - intent["refunded"]
        amount = int(params["amount"]) if str(params.get("amount", "")).isdigit() else left
        if amount > left:
            return _error(400, "invalid_request_error", f"only {left} is left to refund")
        intent["refunded"] += amount
        made = {
            "id": fake.new_id("re"),
            "object": "refund",
            "amount": amount,
            "currency": intent["currency"],
            "payment_intent": intent["id"],
            "status": "succeeded",
            "metadata": params.get("metadata", {}),
            "created": int(fake.clock().timestamp()),
        }
        fake.refunds[str(made["id"])] = made
        return 200, made

    @app.post("/v1/payment_intents")
    async def post_intent(request: Request) -> JSONResponse:
        return await idempotent(request, create_intent)

    @app.post("/v1/payment_intents/{intent_id}/confirm")
    async def post_confirm(intent_id: str, request: Request) -> JSONResponse:
        key = request.headers.get("idempotency-key")
        return await idempotent(request, lambda params: confirm(intent_id, params, key))

    @app.post("/v1/payment_intents/{intent_id}/cancel")
    async def post_cancel(intent_id: str, request: Request) -> JSONResponse:
        return await idempotent(request, lambda params: cancel(intent_id, params))

    @app.post("/v1/refunds")
    async def post_refund(request: Request) -> JSONResponse:
        return await idempotent(request, refund)

    @app.get("/v1/payment_intents/search")
    async def search(query: str) -> JSONResponse:
        matched = _SEARCH.match(query)
        if matched is None:
            status, body = _error(400, "invalid_request_error", f"unsupported query {query!r}")
            return JSONResponse(body, status_code=status)
        key = re.sub(r"\\(.)", r"\1", matched.group(1))
        found = [_shown(i) for i in fake.intents.values() if i["metadata"].get("op_key") == key]
        return JSONResponse({"object": "search_result", "data": found, "has_more": False})

    @app.get("/v1/payment_intents/{intent_id}")
    async def get_intent(intent_id: str, request: Request) -> JSONResponse:
        intent = fake.intents.get(intent_id)
        if intent is None:
            status, body = _error(404, "invalid_request_error", "No such payment_intent")
            return JSONResponse(body, status_code=status)
        shown = _shown(intent)
        if "latest_charge" in request.query_params.getlist("expand[]"):
            shown["latest_charge"] = {"object": "charge", "amount_refunded": intent["refunded"]}
        return JSONResponse(shown)

    @app.get("/v1/payment_intents")
    async def list_intents() -> JSONResponse:
        shown = [_shown(i) for i in fake.intents.values()]
        return JSONResponse({"object": "list", "data": shown, "has_more": False})

    @app.get("/v1/refunds")
    async def list_refunds(payment_intent: str | None = None) -> JSONResponse:
        listed = [r for r in fake.refunds.values() if payment_intent in (None, r["payment_intent"])]
        return JSONResponse({"object": "list", "data": listed, "has_more": False})

    return app


def _shown(intent: dict[str, Any]) -> dict[str, Any]:
    # `refunded` is the fake's bookkeeping; Stripe shows it on the charge.
    return {k: v for k, v in intent.items() if k != "refunded"}


@asynccontextmanager
async def running_fake() -> AsyncIterator[tuple[StripeFake, str]]:
    """The fake served on a loopback port in this loop: (its state, its base URL)."""
    fake = StripeFake()
    async with serving(create_app(fake)) as url:
        yield fake, url
