"""The transactions of a chaos run: a seeded mix, submitted and (some) aborted over HTTP.

Kinds (the issue's mix): `happy` commits; `decline` fails its charge and compensates the
reserve; `decline-third` fails a third step, so two undos run in reverse order and an
`on_compensated` notification follows; `abort` is aborted at a random moment (before,
during or after commit); `lost`, `pending` and `webhook-*` arm the sandbox fault of that
name just before being submitted (faults are per operation, not per transaction, so the
fault hits whichever call comes next: this transaction's or a neighbour's).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx

from services.devtools.chaos.history import Submitted
from services.intake.example import example_transaction

KINDS: dict[str, float] = {
    "happy": 0.30,
    "decline": 0.14,
    "decline-third": 0.10,
    "abort": 0.12,
    "lost": 0.10,
    "pending": 0.06,
    "webhook-duplicate": 0.06,
    "webhook-drop": 0.06,
    "webhook-reorder": 0.06,
}

# The fault each fault-carrying kind arms before its submission.
KIND_FAULTS: dict[str, dict[str, Any]] = {
    "lost": {"operation": "payments.charge", "mode": "lose_response_after_commit"},
    "pending": {"operation": "inventory.reserve", "mode": "pending", "delay_ms": 1500},
    "webhook-duplicate": {"mode": "webhook_duplicate", "times": 2},
    "webhook-drop": {"mode": "webhook_drop", "times": 2},
    "webhook-reorder": {"mode": "webhook_reorder", "times": 3, "delay_ms": 400},
}


@dataclass(frozen=True)
class Planned:
    tx_id: str
    kind: str
    body: dict[str, Any]
    abort_after_s: float | None = None


def plan(seed: int, count: int) -> list[Planned]:
    """The run's transactions, the same for the same seed."""
    rng = random.Random(f"workload-{seed}")
    kinds, weights = list(KINDS), list(KINDS.values())
    planned = []
    for i in range(count):
        kind = rng.choices(kinds, weights)[0]
        tx_id = f"chaos-{seed}-{i}"
        abort_after = round(rng.uniform(0.0, 1.5), 2) if kind == "abort" else None
        planned.append(Planned(tx_id, kind, body_for(kind, tx_id), abort_after))
    return planned


def body_for(kind: str, tx_id: str) -> dict[str, Any]:
    if kind == "decline":
        return example_transaction(tx_id, customer="cus_decline")
    body = example_transaction(tx_id)
    if kind == "decline-third":
        body["steps"].append(
            {
                "action": "deposit",
                "provider": "sandbox",
                "operation": "payments.charge",
                "payload": {"amount": 500, "currency": "usd", "customer": "cus_decline"},
                "compensation": {"operation": "payments.refund"},
            }
        )
        body["on_compensated"] = [
            {
                "action": "apology",
                "provider": "sandbox",
                "operation": "email.send",
                "payload": {"to": "a@example.com", "template": "order-cancelled"},
            }
        ]
    return body


class Workload:
    """Submits the planned transactions, `concurrency` at a time, retrying what the stack
    could not answer (a killed intake, a broker down) until `answer_within_s`."""

    def __init__(
        self,
        intake_url: str,
        sandbox_url: str,
        planned: list[Planned],
        concurrency: int,
        rate: float = 8.0,
        answer_within_s: float = 90,
        api_key: str = "demo-key",
    ) -> None:
        self.intake_url, self.sandbox_url = intake_url, sandbox_url
        self.planned = planned
        self.concurrency = concurrency
        # Submissions per second: spreads the run (and the nemesis, which fires after given
        # numbers of submissions) over time instead of queueing everything at once.
        self.rate = rate
        self.answer_within_s = answer_within_s
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.started = 0  # how many submissions have begun: the nemesis's clock
        self.submitted: list[Submitted] = []
        self.refusals: list[str] = []

    async def run(self) -> list[Submitted]:
        gate = asyncio.Semaphore(self.concurrency)
        loop = asyncio.get_running_loop()
        begin = loop.time()
        async with httpx.AsyncClient(timeout=10) as client:

            async def one(number: int, item: Planned) -> None:
                await asyncio.sleep(max(0.0, begin + number / self.rate - loop.time()))
                async with gate:
                    self.started += 1
                    await self._one(client, item)

            await asyncio.gather(*(one(n, item) for n, item in enumerate(self.planned)))
        return self.submitted

    async def _one(self, client: httpx.AsyncClient, item: Planned) -> None:
        fault = KIND_FAULTS.get(item.kind)
        if fault is not None:
            await _post(client, f"{self.sandbox_url}/v1/faults", fault, {}, 10)
        owner: dict[str, Any] = {}
        status = await _post(
            client,
            f"{self.intake_url}/v1/transactions",
            item.body,
            self.headers,
            self.answer_within_s,
            answer=owner,
        )
        answered = status is not None and 200 <= status < 300
        if status is not None and not answered:
            self.refusals.append(f"{item.tx_id}: {status}")
        self.submitted.append(Submitted(item.tx_id, item.kind, answered))
        if answered and item.abort_after_s is not None:
            await asyncio.sleep(item.abort_after_s)
            await _post(
                client,
                f"{self.intake_url}/v1/transactions/{item.tx_id}/abort",
                # As the submitting session, with its owner token (an agent's abort
                # must name and prove it).
                {"reason": "chaos", "actor": "chaos", **owner.get("owner", {})},
                self.headers,
                self.answer_within_s,
            )


async def _post(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    within_s: float,
    answer: dict[str, Any] | None = None,
) -> int | None:
    """POST until an answer that is not a 5xx, or None when none came in time. Resending is
    safe: submissions are idempotent per tx_id and aborts per transaction."""
    deadline = time.monotonic() + within_s
    last: int | None = None
    while time.monotonic() < deadline:
        try:
            response = await client.post(url, json=body, headers=headers)
            last = response.status_code
            if last < 500:
                if answer is not None and last < 300:
                    answer.update(response.json())  # the caller wants the body too
                return last
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.3)
    return last if last is not None and last < 500 else None
