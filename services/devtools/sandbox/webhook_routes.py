"""Routes for watching and replaying the sandbox's webhook deliveries (tests and operators)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from services.devtools.sandbox.outbound import WebhookSender
from services.devtools.sandbox.responses import error_response
from services.devtools.sandbox.webhook_outbox import DeliveryStatus, WebhookOutbox


def webhook_routes(outbox: WebhookOutbox, sender: WebhookSender | None) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/webhooks/deliveries")
    async def list_deliveries(effect_id: str | None = None, status: str | None = None) -> Response:
        """Every webhook delivery, oldest first, with its status, attempts and last error."""
        wanted: DeliveryStatus | None = None
        if status is not None:
            try:
                wanted = DeliveryStatus(status)
            except ValueError:
                known = ", ".join(s.value for s in DeliveryStatus)
                return error_response(
                    400, "unknown_status", f"Unknown status {status!r}; use one of {known}."
                )
        listed = await asyncio.to_thread(outbox.find, effect_id, wanted)
        return JSONResponse({"deliveries": [d.to_json() for d in listed]})

    @router.post("/v1/webhooks/replay/{event_id}")
    async def replay(event_id: str) -> Response:
        """Send one webhook again, now: same event id and body, a fresh signature timestamp.

        Answers with what the receiver said; a successful replay settles a failed or dropped
        delivery, and never un-delivers a delivered one.
        """
        if sender is None:
            return error_response(
                409,
                "webhooks_disabled",
                "This sandbox sends no webhooks; start it with --webhook-url "
                "(or RECON_SANDBOX_WEBHOOK_URL).",
            )
        delivery = await asyncio.to_thread(outbox.get, event_id)
        if delivery is None:
            return error_response(404, "unknown_event", f"No webhook event {event_id!r}.")
        attempt, updated = await sender.replay(delivery)
        return JSONResponse(
            {
                "event_id": event_id,
                "attempt": {
                    "ok": attempt.ok,
                    "status_code": attempt.status_code,
                    "error": attempt.error,
                },
                "delivery": updated.to_json(),
            }
        )

    return router
