"""The webhook ingress's drift claims are bounded (services.intake.delivery_batches.
DRIFT_CLAIMS): each holds a connection of the intake's main pool until Kafka acknowledges
its report, so a burst of stray webhooks while those reports are held must not take the
connections submissions need. Against the real intake (in-process, over ASGI), Postgres and
Kafka; the reports are held by the claims of another reporter (the drift scan's, as while
Kafka is slow to acknowledge its reports): rows of the same drift ids inserted in a
transaction the test keeps open, at which each webhook's claim waits."""

from __future__ import annotations

import asyncio
from collections import Counter

import asyncpg
import httpx
from support.decider_support import eventually
from support.intake_app import intake_client, settings_fixture
from support.topic_records import read_records
from test_webhook_ingress import NEW_SECRET, event_body, signed

from events.drift import DriftKind, drift_id
from reconcilers.signatures import Scheme
from services.config import Settings
from services.intake.app import create_app
from services.intake.delivery_batches import DRIFT_CLAIMS
from services.intake.example import example_transaction

settings = settings_fixture(webhook_secrets={"sandbox": (NEW_SECRET,)})

SUBMISSION = example_transaction("order-during-burst")
# Time enough for a submission with a free connection (it took well under a second here).
SUBMIT_TIMEOUT_S = 15.0


async def _at_the_claim(conn: asyncpg.Connection) -> int:
    """The intake's claims waiting at the rows the test holds."""
    waiting: int = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND query LIKE '%INSERT INTO reconciler_drift_reported%'"
    )
    return waiting


async def test_a_burst_of_stray_webhooks_whose_reports_are_held_leaves_submissions_a_connection(
    settings: Settings,
) -> None:
    app = create_app(settings)
    async with intake_client(settings, app) as http:
        pool_size = app.state.pool.get_max_size()
        strays = [f"ch_stray_{n}" for n in range(pool_size + 2)]
        ids = {s: drift_id(DriftKind.EFFECT_WITHOUT_INTENT, "sandbox", s) for s in strays}
        holder = await asyncpg.connect(settings.database_url)
        watcher = await asyncpg.connect(settings.database_url)
        holding = holder.transaction()
        await holding.start()
        try:
            await holder.execute(
                "INSERT INTO reconciler_drift_reported (drift_id, kind, reported_at)"
                " SELECT unnest($1::text[]), 'effect_without_intent', now()",
                sorted(ids.values()),
            )

            async def deliver(stray: str) -> httpx.Response:
                event = f"evt_{stray}"
                body = event_body(event, stray, "rk1_nobody")
                return await http.post(
                    "/v1/webhooks/sandbox",
                    content=body,
                    headers=signed(Scheme.STANDARD, event, body),
                )

            burst = [asyncio.create_task(deliver(s)) for s in strays]

            async def settled() -> bool:
                # Each delivery answered or waiting at a held row; unbounded, every one of
                # the pool's connections waits there instead (and the others on the pool).
                waiting = await _at_the_claim(watcher)
                answered = sum(t.done() for t in burst)
                return waiting + answered == len(burst) or waiting >= pool_size

            await eventually(settled, "the burst at the claims or answered")
            async with asyncio.timeout(SUBMIT_TIMEOUT_S):
                submitted = await http.post(
                    "/v1/transactions",
                    json=SUBMISSION,
                    headers={"Authorization": "Bearer key-acme"},
                )
            assert submitted.status_code == 202, submitted.text
            assert await _at_the_claim(watcher) == DRIFT_CLAIMS
            refused = [t.result() for t in burst if t.done()]
            assert len(refused) == len(strays) - DRIFT_CLAIMS
            for answer in refused:
                assert answer.status_code == 503, answer.text
                assert answer.headers["Retry-After"] == "1"
                assert "drift reports being claimed" in answer.json()["message"]
        finally:
            await holding.rollback()
            await holder.close()
            await watcher.close()
        # The held claims go on once the other reporter's rows are gone, and the refused
        # deliveries' retries (the provider's, one at a time here) report theirs: every
        # stray reported once.
        held = [t for t in burst if not t.done() or t.result().status_code != 503]
        assert [(await t).status_code for t in held] == [200] * DRIFT_CLAIMS
        for stray, task in zip(strays, burst, strict=True):
            if task not in held:
                retried = await deliver(stray)
                assert retried.status_code == 200, retried.text
        reports = await read_records(
            settings.kafka_bootstrap, settings.topics.drift, "read_uncommitted"
        )
        assert Counter((r.key or b"").decode() for r in reports) == dict.fromkeys(ids.values(), 1)
