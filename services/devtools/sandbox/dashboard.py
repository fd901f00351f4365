"""The provider's dashboard: what a person does at the provider outside recon (seed 004).

- `GET /v1/charges/{charge}/balance`: `{"charge", "amount", "refunded", "refundable",
  "revoked"}` (404 for a charge the sandbox never made): what recon's precondition check
  reads before a new attempt of a refund;
- `POST /v1/dashboard/refund` `{"charge", "amount"}`: an operator's refund, recorded as a
  `payments.refund` effect under a fresh key (drift sees it as an effect without intent),
  subject to the same balance rules; `{"effect": ...}` or the refusal;
- `POST /v1/dashboard/revoke` `{"charge"}`: revokes the charge's authorization; later
  refunds of it are refused;
- `POST /v1/dashboard/reinstate` `{"charge"}`: the authorization holds again.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from services.devtools.sandbox import balances
from services.devtools.sandbox.catalog import Operation
from services.devtools.sandbox.store import SandboxStore, _utc_iso


def dashboard_routes(store: SandboxStore) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/charges/{charge}/balance")
    async def charge_balance(charge: str) -> Response:
        def read() -> balances.Balance | None:
            with store.transaction() as db:
                return balances.balance(db, charge)

        found = await asyncio.to_thread(read)
        if found is None:
            return JSONResponse(
                {"error": "unknown_charge", "message": f"No charge {charge!r}."}, 404
            )
        return JSONResponse(found.to_json())

    @router.post("/v1/dashboard/refund")
    async def dashboard_refund(request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        payload = {"charge": body.get("charge"), "amount": body.get("amount")}
        key = f"dashboard_{uuid.uuid4().hex}"
        result = await asyncio.to_thread(
            store.submit, Operation.PAYMENTS_REFUND, key, payload, {"source": "dashboard"}
        )
        if result.effect is None:
            return JSONResponse(result.body, result.status_code)
        return JSONResponse({"effect": result.effect.to_json()}, result.status_code)

    @router.post("/v1/dashboard/revoke")
    async def dashboard_revoke(request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        charge = str(body.get("charge"))

        def write() -> None:
            with store.transaction() as db:
                balances.revoke(db, charge, _utc_iso(store.clock()))

        await asyncio.to_thread(write)
        return JSONResponse({"charge": charge, "revoked": True})

    @router.post("/v1/dashboard/reinstate")
    async def dashboard_reinstate(request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        charge = str(body.get("charge"))

        def write() -> None:
            with store.transaction() as db:
                balances.reinstate(db, charge)

        await asyncio.to_thread(write)
        return JSONResponse({"charge": charge, "revoked": False})

    return router
