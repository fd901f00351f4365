"""What the provider sends out after an effect: signed webhooks, from the outbox.

The outbox row is written in the effect's own transaction (webhook_outbox.py), so this sender
only ever announces committed effects and a crash loses nothing: on restart every pending row
is simply due again. Delivery is at-least-once, like every real provider's, with redelivery on
a non-2xx answer or a connection error (RedeliveryPolicy). Webhook faults (faults.py) act on a
webhook's first delivery: duplicate, delay, drop or reorder it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import assert_never

from reconcilers.signatures import Scheme, sign_standard, sign_stripe
from services.devtools.sandbox.faults import ArmedFault, FaultBoard, FaultMode
from services.devtools.sandbox.store import Effect
from services.devtools.sandbox.webhook_config import WebhookConfig
from services.devtools.sandbox.webhook_outbox import Delivery, WebhookOutbox
from services.providers.http import ProviderHttp, ProviderUnreachable

logger = logging.getLogger(__name__)

# Upper bound on how long the sender sleeps with nothing due: it is woken at once for new
# effects, so this only matters for rows another process wrote into the same file.
_IDLE_POLL_S = 1.0
_USER_AGENT = "recon-sandbox-webhooks/1"


@dataclass(frozen=True)
class Attempt:
    ok: bool
    status_code: int | None
    error: str | None


@dataclass
class _ReorderBatch:
    held: list[Delivery] = field(default_factory=list)
    released: asyncio.Event = field(default_factory=asyncio.Event)


class WebhookSender:
    """The background task that drains the outbox; started and stopped by the app's lifespan."""

    def __init__(
        self,
        config: WebhookConfig,
        outbox: WebhookOutbox,
        faults: FaultBoard,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._outbox = outbox
        self._faults = faults
        self._clock = clock
        self._wake = asyncio.Event()
        # Event ids with an attempt under way (or held by a fault) in this process, so the scan
        # does not start a second one; lost on restart, when those rows are simply due again.
        self._in_flight: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._reorder: _ReorderBatch | None = None
        # aiohttp (recon's provider client), not httpx: httpcore's pool walks every
        # connection at each request, and the deliveries of a busy benchmark kept dozens
        # open, so sending took 74 % of the sandbox's CPU, 37 % in that walk (CPU samples
        # at c30, docs/benchmark.md "The sandbox's webhook sender"); and above its 20
        # kept-alive connections httpx closed each one after use, a new connection to the
        # receiver for most deliveries.
        self._client: ProviderHttp | None = None
        self._open = AsyncExitStack()
        self._runner: asyncio.Task[None] | None = None

    def on_effect_recorded(self, effect: Effect) -> None:
        """Called after an effect's commit: its delivery is already in the outbox; wake up."""
        del effect
        self._wake.set()

    async def start(self) -> None:
        self._client = await self._open.enter_async_context(ProviderHttp(self._config.timeout_s))
        self._runner = asyncio.create_task(self._run(), name="webhook-sender")

    async def stop(self) -> None:
        tasks = [*self._tasks, *([self._runner] if self._runner else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._open.aclose()

    async def replay(self, delivery: Delivery) -> tuple[Attempt, Delivery]:
        """Send one webhook again now, same id and body, bypassing faults (an operator's ask)."""
        attempt, updated = await self._attempt(delivery)
        self._wake.set()
        return attempt, updated

    async def _run(self) -> None:
        while True:
            # Cleared before the scan, so a wake-up that lands during it is not lost.
            self._wake.clear()
            try:
                wait_s = await self._start_due()
            except Exception:
                logger.exception("Scanning the webhook outbox failed; retrying shortly.")
                wait_s = _IDLE_POLL_S
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=wait_s)
            except TimeoutError:
                pass

    async def _start_due(self) -> float:
        """Start an attempt for every due delivery; the seconds until the next one is due."""
        now = self._clock()
        due, later = await asyncio.to_thread(self._outbox.due, now)
        wait_s = _IDLE_POLL_S if later is None else min(_IDLE_POLL_S, later - now)
        for delivery in due:
            if delivery.event_id in self._in_flight:
                continue
            self._in_flight.add(delivery.event_id)
            task = asyncio.create_task(self._deliver(delivery))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return max(wait_s, 0.0)

    async def _deliver(self, delivery: Delivery) -> None:
        try:
            fault = None
            if delivery.attempts == 0:
                fault = self._faults.take_delivery_fault(delivery.operation)
            await self._deliver_with(delivery, fault)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Recorded, and the row stays pending: the next scan retries it.
            logger.exception("Delivering webhook %s failed unexpectedly.", delivery.event_id)
        finally:
            self._in_flight.discard(delivery.event_id)
            self._wake.set()

    async def _deliver_with(self, delivery: Delivery, fault: ArmedFault | None) -> None:
        if fault is None:
            await self._attempt(delivery)
            return
        logger.info("Webhook %s: injected fault %s.", delivery.event_id, fault.mode.value)
        match fault.mode:
            case FaultMode.WEBHOOK_DROP:
                await asyncio.to_thread(self._outbox.mark_dropped, delivery.event_id)
            case FaultMode.WEBHOOK_DELAY:
                await asyncio.sleep(fault.delay_ms / 1000)
                await self._attempt(delivery)
            case FaultMode.WEBHOOK_DUPLICATE:
                await self._attempt(delivery)
                await self._attempt(delivery)
            case FaultMode.WEBHOOK_REORDER:
                await self._hold_for_reorder(delivery, fault.delay_ms)
            case (
                FaultMode.LOSE_RESPONSE_AFTER_COMMIT
                | FaultMode.ERROR_500_AFTER_COMMIT
                | FaultMode.ERROR_500_BEFORE_COMMIT
                | FaultMode.DELAY
                | FaultMode.PENDING
                | FaultMode.LOOKUP_UNAVAILABLE
            ):
                raise AssertionError(f"{fault.mode.value} is not a webhook fault")
            case _:
                assert_never(fault.mode)

    async def _hold_for_reorder(self, delivery: Delivery, delay_ms: int) -> None:
        # Everything held from the first until `delay_ms` later goes out in reverse order, one
        # after the other, so the receiver sees the later effects' webhooks first.
        batch = self._reorder
        if batch is not None:
            batch.held.append(delivery)
            await batch.released.wait()
            return
        batch = self._reorder = _ReorderBatch(held=[delivery])
        try:
            try:
                await asyncio.sleep(delay_ms / 1000)
            finally:
                # Closed before sending: a delivery arriving from now on starts its own batch.
                if self._reorder is batch:
                    self._reorder = None
            for held in reversed(batch.held):
                await self._attempt(held)
        finally:
            batch.released.set()

    async def _attempt(self, delivery: Delivery) -> tuple[Attempt, Delivery]:
        attempt = await self._post(delivery)
        updated = await asyncio.to_thread(
            self._outbox.record_attempt,
            delivery.event_id,
            ok=attempt.ok,
            error=attempt.error,
            policy=self._config.redelivery,
        )
        logger.info(
            "Webhook %s attempt %d: %s; now %s.",
            delivery.event_id,
            updated.attempts,
            "delivered" if attempt.ok else attempt.error,
            updated.status.value,
        )
        return attempt, updated

    async def _post(self, delivery: Delivery) -> Attempt:
        assert self._client is not None, "start() the sender before sending"
        body = delivery.body.encode("utf-8")
        # Signed at each attempt with the attempt's time, as providers do: a redelivery hours
        # later still passes the receiver's timestamp tolerance, and the id stays the same.
        headers = {
            "Content-Type": "application/json",
            "User-Agent": _USER_AGENT,
            **self._sign(delivery.event_id, int(self._clock()), body),
        }
        try:
            # The body as signed: the string encodes to the same UTF-8 bytes.
            answer = await self._client.request(
                "POST", self._config.url, data=delivery.body, headers=headers
            )
        except ProviderUnreachable as exc:
            return Attempt(ok=False, status_code=None, error=str(exc))
        if 200 <= answer.status < 300:
            return Attempt(ok=True, status_code=answer.status, error=None)
        return Attempt(
            ok=False, status_code=answer.status, error=f"receiver answered {answer.status}"
        )

    def _sign(self, event_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        match self._config.scheme:
            case Scheme.STANDARD:
                return sign_standard(self._config.secret, event_id, timestamp, body)
            case Scheme.STRIPE:
                return sign_stripe(self._config.secret, timestamp, body)
            case _:
                assert_never(self._config.scheme)
