"""A small client for the end-to-end tests: the intake API and the sandbox, over HTTP."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx

from services.devtools.sandbox.call_pages import every_call
from services.devtools.sandbox.effect_pages import every_effect
from services.intake.example import example_transaction
from support.settled import settled

# The example intent of docs/contract.md, as the tests submit it.
transaction = example_transaction


class Recon:
    def __init__(self, intake_url: str, sandbox_url: str, api_key: str = "demo-key") -> None:
        self.http = httpx.AsyncClient(timeout=30)
        self.intake_url = intake_url
        self.sandbox_url = sandbox_url
        self.headers = {"Authorization": f"Bearer {api_key}"}
        # The owning sessions the submissions returned (with their owner tokens), by tx_id:
        # an agent's abort must name and prove its session, as the SDK's does.
        self.owners: dict[str, dict[str, str]] = {}

    async def close(self) -> None:
        await self.http.aclose()

    async def submit(
        self, body: dict[str, Any], *, retry_unavailable: bool = False, timeout: float = 120
    ) -> httpx.Response:
        deadline = time.monotonic() + timeout
        while True:
            assert time.monotonic() < deadline, f"intake unavailable for {timeout}s"
            try:
                response = await self.http.post(
                    f"{self.intake_url}/v1/transactions", json=body, headers=self.headers
                )
            except httpx.HTTPError:
                if not retry_unavailable:
                    raise
                await asyncio.sleep(0.5)
                continue
            if response.status_code == 503 and retry_unavailable:
                await asyncio.sleep(0.5)
                continue
            if response.status_code in (200, 202) and "owner" in response.json():
                self.owners[response.json()["tx_id"]] = response.json()["owner"]
            return response

    async def get(self, tx_id: str) -> httpx.Response:
        return await self.http.get(
            f"{self.intake_url}/v1/transactions/{tx_id}", headers=self.headers
        )

    async def abort(self, tx_id: str, body: dict[str, Any] | None = None) -> httpx.Response:
        """As the submitting session (or the session `body` names, with its token when this
        client submitted as it), like the SDK."""
        owner = self.owners.get(tx_id)
        if (
            owner is not None
            and (body or {}).get("session_id", owner["session_id"]) == (owner["session_id"])
        ):
            body = {**owner, **(body or {})}
        return await self.http.post(
            f"{self.intake_url}/v1/transactions/{tx_id}/abort",
            headers=self.headers,
            json=body,
        )

    async def events(self, tx_id: str) -> list[dict[str, Any]]:
        response = await self.http.get(
            f"{self.intake_url}/v1/transactions/{tx_id}/events", headers=self.headers
        )
        response.raise_for_status()
        events: list[dict[str, Any]] = response.json()["events"]
        return events

    async def settled_events(
        self, tx_id: str, quiet_s: float = 2.0, timeout: float = 60
    ) -> list[dict[str, Any]]:
        """The transaction's events once its log has not grown for `quiet_s`. A finished
        transaction still gains evidence-only events (a late webhook's ObservationIgnored),
        which the decider's group commit may write up to its wait after the transaction
        ended (RECON_DECIDER_GROUP_COMMIT_MS, longer under load): a test that compares the
        log before and after something must take "before" once it is still."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        events, still_since = await self.events(tx_id), loop.time()
        while loop.time() - still_since < quiet_s:
            assert loop.time() < deadline, f"{tx_id}'s log still growing after {timeout}s"
            await asyncio.sleep(0.25)
            now = await self.events(tx_id)
            if now != events:
                events, still_since = now, loop.time()
        return events

    async def wait_terminal(self, tx_id: str, timeout: float = 60) -> dict[str, Any]:
        """The transaction once it ended or waits for a person, with nothing of it in flight
        or still to be sent (support.settled): what a test counts after it is final."""
        return await self.wait_until(
            tx_id, settled, timeout, f"{tx_id} not terminal after {timeout}s", poll_s=0.2
        )

    async def wait_until(
        self,
        tx_id: str,
        check: Callable[[dict[str, Any]], bool],
        timeout: float,
        failure: str,
        poll_s: float = 0.05,
    ) -> dict[str, Any]:
        """The transaction as the API shows it once `check` holds; `failure` (and the last
        answer seen) if it does not within `timeout`."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            response = await self.get(tx_id)
            if response.status_code == 200:
                last = response.json()
                if check(last):
                    return dict(last)
            await asyncio.sleep(poll_s)
        raise AssertionError(f"{failure}: {last}")

    async def open_reviews(self) -> list[dict[str, Any]]:
        """The tenant's open reviews, as this client's key sees them."""
        response = await self.http.get(
            f"{self.intake_url}/v1/reviews", params={"state": "open"}, headers=self.headers
        )
        response.raise_for_status()
        reviews: list[dict[str, Any]] = response.json()["reviews"]
        return reviews

    async def effects(self, operation: str | None = None) -> list[dict[str, Any]]:
        return await every_effect(self.http, self.sandbox_url, operation or None)

    async def calls(self, key: str | None = None) -> list[dict[str, Any]]:
        """Every apply and lookup the sandbox answered (under `key`), in arrival order."""
        return await every_call(self.http, self.sandbox_url, key)

    async def assert_applied_once(self, key: str) -> list[dict[str, Any]]:
        """Nothing sent twice under `key`: exactly one apply reached the provider, and it
        recorded the effect. Returns the calls for further checks."""
        calls = await self.calls(key)
        applies = [c["outcome"] for c in calls if c["kind"] == "apply"]
        assert applies == ["applied"], (key, calls)
        return calls

    async def assert_looked_up_before_reapplying(self, key: str) -> list[dict[str, Any]]:
        """Every apply after the first was preceded by a lookup of the key that found
        nothing: a second call happened only once absence was proven."""
        calls = await self.calls(key)
        applied_before = False
        absent_since_last_apply = False
        for call in calls:
            if call["kind"] == "lookup":
                absent_since_last_apply = absent_since_last_apply or call["outcome"] == "absent"
                continue
            assert not applied_before or absent_since_last_apply, (key, calls)
            applied_before, absent_since_last_apply = True, False
        return calls

    async def arm(self, operation: str, mode: str, times: int = 1, delay_ms: int = 0) -> None:
        response = await self.http.post(
            f"{self.sandbox_url}/v1/faults",
            json={"operation": operation, "mode": mode, "times": times, "delay_ms": delay_ms},
        )
        response.raise_for_status()

    async def disarm(self) -> None:
        """Every fault armed at the sandbox is dropped (its DELETE /v1/faults)."""
        (await self.http.delete(f"{self.sandbox_url}/v1/faults")).raise_for_status()


def op(tx: dict[str, Any], action: str) -> dict[str, Any]:
    found: dict[str, Any] = next(o for o in tx["operations"] if o["action"] == action)
    return found


def effects_for(effects: list[dict[str, Any]], op_key: str) -> list[dict[str, Any]]:
    return [e for e in effects if e["idempotency_key"] == op_key]
