"""Acme: a fake HTTP service recon has never seen, shaped unlike the sandbox, spoken only
through its provider file (docs/examples/acme.toml) by the `declared` adapter.

How it differs from the sandbox:
- its credential is an `X-Acme-Key` header;
- the idempotency key is a body field, `request_id`, and recon's reference travels in
  `meta.recon_ref`;
- requests and answers are nested (`{"money": {"amount_cents": ...}}`,
  `{"result": {"record": {"ref": ..., "phase": "done"}}}`), refusals are
  `422 {"problem": {"code": ...}}`, a key reused with another body is
  `409 request_id_reused` and a key whose first request still runs `409 request_in_progress`;
- messages are fire and forget: `202` with no body;
- its records are listed page by page (`GET /api/v2/records`, `paging.next`, or `after`
  the last record's ref while `paging.more`), oldest first or newest first
  (`sort=-created`), filtered by `client_ref` for lookups and by `created_since` (unix
  seconds) for a window;
- it announces each record it makes with a signed `record.done` webhook of its own shape.

Keys are kept for ever, or for `retention_s` on the fake's clock (then a resend is new,
as at a `replay` provider). The fake runs in the test's loop (`running_acme`) or as a
process (`python -m support.acme_fake PORT`, for the tests on real parts).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from reconcilers.signatures import sign_standard
from support.local_server import serving
from support.stripe_fake import FakeClock

API_KEY = "acme_test_key"
PAGE_MAX = 50


@dataclass
class Kept:
    fingerprint: str
    at: datetime
    answer: tuple[int, Any] | None = None  # None: the first request still runs


@dataclass
class Acme:
    clock: FakeClock = field(default_factory=FakeClock)
    retention_s: float | None = None
    # False: a refusal is not kept under its key, so a resend is judged afresh (made once
    # its cause is lifted). Not Acme's way: a test-only mode, to show that the contract
    # kit fails such a provider (docs/providers.md, the adapter table's `apply` row).
    keeps_refusals: bool = True
    hold_s: float = 0.0
    # Faults: answer 429 (Retry-After: 1) to the next n requests; per record kind
    # (`payment`, ...), make the next n effects but answer 503 (the answer lost).
    rate_limited: int = 0
    lose: dict[str, int] = field(default_factory=dict)
    # Webhooks: each record made is announced (`record.done`, Standard Webhooks signed
    # with `webhook_secret`) to `webhook_url`, unless muted.
    webhook_url: str | None = None
    webhook_secret: str | None = None
    muted: bool = False
    delivered: list[int] = field(default_factory=list)
    keys: dict[str, Kept] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)
    stock: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def under(self, key: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["request_id"] == key]


def _problem(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse({"problem": {"code": code, "detail": detail}}, status_code=status)


def create_app(acme: Acme) -> FastAPI:
    app = FastAPI(title="acme fake")
    tasks: set[asyncio.Task[None]] = set()  # webhook deliveries under way

    def slow_down() -> Response | None:
        """The rate-limit fault: 429, Retry-After one second."""
        if acme.rate_limited <= 0:
            return None
        acme.rate_limited -= 1
        return JSONResponse(
            {"problem": {"code": "slow_down"}}, status_code=429, headers={"Retry-After": "1"}
        )

    def authorised(request: Request) -> bool:
        return request.headers.get("x-acme-key") == API_KEY

    async def once(request: Request, make: Any) -> Response:
        """Acme's idempotency: `request_id` in the body, the answer kept and replayed."""
        acme.requests += 1
        if not authorised(request):
            return _problem(401, "unauthenticated", "X-Acme-Key is missing or wrong")
        if (slowed := slow_down()) is not None:
            return slowed
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _problem(400, "malformed", "not JSON")
        key = body.get("request_id") if isinstance(body, dict) else None
        if not isinstance(key, str) or not key:
            return _problem(400, "request_id_required", "every write carries request_id")
        fingerprint = json.dumps([request.url.path, body], sort_keys=True)
        kept = acme.keys.get(key)
        now = acme.clock()
        if kept is not None and acme.retention_s is not None:
            if (now - kept.at).total_seconds() >= acme.retention_s:
                kept = None  # pruned: the key is new again
        if kept is not None:
            if kept.fingerprint != fingerprint:
                return _problem(409, "request_id_reused", "request_id was used for another body")
            if kept.answer is None:
                return _problem(409, "request_in_progress", "the first request still runs")
            status, answer = kept.answer
            return _answer(status, answer)
        acme.keys[key] = Kept(fingerprint, now)
        if acme.hold_s:
            await asyncio.sleep(acme.hold_s)
        status, answer = make(body, key, now)
        if status >= 500:
            del acme.keys[key]  # not kept, as a crash before the answer was saved
        elif status >= 400 and not acme.keeps_refusals:
            del acme.keys[key]
        else:
            acme.keys[key].answer = (status, answer)
        made = (answer or {}).get("result", {}).get("record", {}).get("kind", "message")
        if status < 300 and acme.lose.get(made, 0) > 0:
            acme.lose[made] -= 1
            return _problem(503, "unavailable", "the answer was lost")
        return _answer(status, answer)

    async def announce(made: dict[str, Any]) -> None:
        if acme.webhook_url is None or acme.webhook_secret is None or acme.muted:
            return
        event_id = f"evt_{made['ref']}"
        body = json.dumps({"id": event_id, "type": "record.done", "data": {"record": made}})
        headers = sign_standard(acme.webhook_secret, event_id, int(time.time()), body.encode())
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(
                acme.webhook_url,
                content=body.encode(),
                headers={**headers, "Content-Type": "application/json"},
            )
        acme.delivered.append(answer.status_code)

    def record(kind: str, key: str, body: dict[str, Any], now: datetime, **details: Any) -> Any:
        made = {
            "ref": f"{kind[:3]}_{next(acme.ids):06d}",
            "kind": kind,
            "phase": "done",
            "request_id": key,
            "meta": body.get("meta") or {},
            "created": int(now.timestamp()),
            "details": details,
        }
        acme.records.append(made)
        tasks.add(task := asyncio.get_running_loop().create_task(announce(made)))
        task.add_done_callback(tasks.discard)
        return made

    @app.post("/api/v2/holds")
    async def hold(request: Request) -> Response:
        def make(body: dict[str, Any], key: str, now: datetime) -> tuple[int, Any]:
            item = body.get("item") or {}
            sku, quantity = item.get("sku"), item.get("quantity")
            if not isinstance(sku, str) or not isinstance(quantity, int) or quantity < 1:
                return 422, {"problem": {"code": "invalid_item", "detail": "sku and quantity"}}
            if acme.stock.get(sku, 100) < quantity:
                return 422, {"problem": {"code": "out_of_stock", "detail": sku}}
            acme.stock[sku] = acme.stock.get(sku, 100) - quantity
            return 201, {
                "result": {"record": record("hold", key, body, now, sku=sku, quantity=quantity)}
            }

        return await once(request, make)

    @app.post("/api/v2/holds/{ref}/release")
    async def release(ref: str, request: Request) -> Response:
        def make(body: dict[str, Any], key: str, now: datetime) -> tuple[int, Any]:
            held = next((r for r in acme.records if r["ref"] == ref and r["kind"] == "hold"), None)
            if held is None:
                return 422, {"problem": {"code": "no_such_hold", "detail": ref}}
            sku = held["details"]["sku"]
            acme.stock[sku] = acme.stock.get(sku, 100) + held["details"]["quantity"]
            return 200, {"result": {"record": record("release", key, body, now, hold=ref)}}

        return await once(request, make)

    @app.post("/api/v2/payments")
    async def pay(request: Request) -> Response:
        def make(body: dict[str, Any], key: str, now: datetime) -> tuple[int, Any]:
            money = body.get("money") or {}
            if body.get("payer") == "cus_decline":
                return 422, {"problem": {"code": "card_declined", "detail": "declined"}}
            return 201, {
                "result": {
                    "record": record(
                        "payment",
                        key,
                        body,
                        now,
                        amount_cents=money.get("amount_cents"),
                        currency=money.get("currency"),
                    )
                }
            }

        return await once(request, make)

    @app.post("/api/v2/payments/{ref}/refunds")
    async def refund(ref: str, request: Request) -> Response:
        def make(body: dict[str, Any], key: str, now: datetime) -> tuple[int, Any]:
            paid = any(r["ref"] == ref and r["kind"] == "payment" for r in acme.records)
            if not paid:
                return 422, {"problem": {"code": "no_such_payment", "detail": ref}}
            money = body.get("money") or {}
            return 201, {
                "result": {
                    "record": record(
                        "refund",
                        key,
                        body,
                        now,
                        payment=ref,
                        amount_cents=money.get("amount_cents"),
                    )
                }
            }

        return await once(request, make)

    @app.post("/api/v2/messages")
    async def message(request: Request) -> Response:
        def make(body: dict[str, Any], key: str, now: datetime) -> tuple[int, Any]:
            record("message", key, body, now, to=body.get("to"), template=body.get("template"))
            return 202, None  # fire and forget: nothing to read

        return await once(request, make)

    @app.get("/api/v2/records")
    async def records(request: Request) -> Response:
        acme.requests += 1
        if not authorised(request):
            return _problem(401, "unauthenticated", "X-Acme-Key is missing or wrong")
        if (slowed := slow_down()) is not None:
            return slowed
        asked = request.query_params
        ref = asked.get("client_ref")
        size = min(int(asked.get("page_size", "20")), PAGE_MAX)
        since = asked.get("created_since")  # unix seconds: those created then or later
        if since is not None and not since.isdigit():
            return _problem(400, "invalid_created_since", "created_since is unix seconds")
        if asked.get("sort", "created") not in ("created", "-created"):
            return _problem(400, "invalid_sort", "sort is created or -created (newest first)")
        chosen = [
            r
            for r in acme.records
            if (ref is None or r["meta"].get("recon_ref") == ref)
            and (since is None or r["created"] >= int(since))
        ]
        if asked.get("sort") == "-created":
            # Made later, listed first: records are kept in the order they were made.
            chosen.reverse()
        # Two ways to ask for the next page: `cursor`, the offset `paging.next` gave, or
        # `after`, the last listed record's ref (while `paging.more` says more follow).
        after = asked.get("after")
        refs = [r["ref"] for r in chosen]
        if after is not None and after not in refs:
            return _problem(400, "invalid_after", "after names no listed record")
        start = refs.index(after) + 1 if after is not None else int(asked.get("cursor", "0") or 0)
        page = chosen[start : start + size]
        more = start + size < len(chosen)
        return JSONResponse(
            {
                "result": {"records": page},
                "paging": {"next": str(start + size) if more else None, "more": more},
            }
        )

    return app


def _answer(status: int, body: Any) -> Response:
    if body is None:
        return Response(status_code=status)
    return JSONResponse(body, status_code=status)


@asynccontextmanager
async def running_acme(acme: Acme | None = None) -> AsyncIterator[tuple[Acme, str]]:
    """The fake on a loopback port in this loop: (its state, its base URL)."""
    state = acme or Acme()
    async with serving(create_app(state)) as url:
        yield state, url


if __name__ == "__main__":
    uvicorn.run(create_app(Acme()), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
