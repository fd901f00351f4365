"""Every recon process serves Prometheus metrics on its own port (issue 14, item 4): a
scrape during a run of real processes shows each family fed: transactions by status,
operations by state, dispatch latency by provider and operation, lookups and their
outcomes, webhook verifications, consumer lag per partition, reviews open (and opened),
kill switches engaged, Kafka intents; and (issue 25, item 2) the intake's HTTP requests,
accepted-to-committed time, the decider's Kafka transactions and the oldest open review's
age."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families
from support.recon_client import Recon, op, transaction
from support.stack_fixtures import StackWith

from events.topics import Topics
from services.devtools.stack import SERVICES, Stack

# A stuck charge is looked up after 3 s (longer than a healthy call takes under load, so
# the first transaction is not looked up), and two unanswered lookups spend the budget.
FAST_REVIEW = {
    "RECON_RECONCILE_INTERVAL_S": "0.3",
    "RECON_RECONCILE_AFTER_S": "3",
    "RECON_RECONCILE_BUDGET": "2",
    "RECON_RECONCILE_BACKOFF_S": "0.3",
    "RECON_RECONCILE_BACKOFF_MAX_S": "1",
}
Samples = list[tuple[str, dict[str, str], float]]


@pytest.fixture
async def fast_stack(stack_with: StackWith) -> AsyncIterator[Stack]:
    async with stack_with(**FAST_REVIEW) as (stack, _):
        yield stack


async def scrape(stack: Stack) -> Samples:
    """Every sample of every recon process (the sandbox is not one)."""
    samples: Samples = []
    async with httpx.AsyncClient(timeout=5) as http:
        for name in SERVICES:
            if name == "sandbox":
                continue
            response = await http.get(stack.metrics_url(name))
            assert response.status_code == 200, (name, response.text)
            for family in text_string_to_metric_families(response.text):
                samples += [(s.name, s.labels, s.value) for s in family.samples]
    return samples


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(
        value
        for sample, found, value in samples
        if sample == name and all(found.get(k) == v for k, v in labels.items())
    )


async def test_a_scrape_shows_every_metric_family_fed(fast_stack: Stack) -> None:
    stack = fast_stack
    recon = Recon(stack.intake_url, stack.sandbox_url)
    producer = AIOKafkaProducer(bootstrap_servers=stack.kafka_bootstrap, request_timeout_ms=60000)
    await producer.start()
    try:
        await producer.send_and_wait(
            Topics(stack.topic_prefix).intents("demo"),
            key=b"demo/metrics-ok",
            value=json.dumps(transaction("metrics-ok")).encode(),
        )
        assert (await recon.wait_terminal("metrics-ok"))["status"] == "committed"
        # A charge nobody can settle: its response lost, its webhook dropped, its lookups
        # unanswered, so the reconciler's one lookup is spent and a review opens.
        await recon.arm("payments.charge", "lookup_unavailable", times=1000)
        await recon.arm("payments.charge", "lose_response_after_commit", times=1)
        await recon.arm("payments.charge", "webhook_drop", times=1)
        assert (await recon.submit(transaction("metrics-review"))).status_code == 202
        reviewed = await recon.wait_terminal("metrics-review", timeout=90)
        assert op(reviewed, "charge")["state"] == "manual_review", reviewed
        # A kill switch on an operation nothing here uses: the decider's gauge shows it.
        switched = await recon.http.post(
            f"{stack.intake_url}/v1/kill-switches",
            json={"scope": {"operation": "records.delete"}, "reason": "metrics test"},
            headers={"Authorization": "Bearer ops-key"},
        )
        assert switched.status_code == 201, switched.text

        # Gauges are refreshed on a schedule and counters follow the events: poll.
        deadline = time.monotonic() + 30
        while True:
            samples = await scrape(stack)
            fed = {
                "transactions committed": total(
                    samples, "recon_transactions_total", status="committed"
                ),
                "transactions running": total(
                    samples, "recon_transactions_total", status="running"
                ),
                "transactions in review": total(
                    samples, "recon_transactions_total", status="manual_review"
                ),
                "operations confirmed": total(samples, "recon_operations_total", state="confirmed"),
                "operations pending": total(samples, "recon_operations_total", state="pending"),
                "dispatch latency": total(
                    samples,
                    "recon_dispatch_seconds_count",
                    provider="sandbox",
                    operation="payments.charge",
                ),
                "lookups unavailable": total(
                    samples, "recon_lookups_total", provider="sandbox", outcome="unavailable"
                ),
                "webhooks verified": total(
                    samples, "recon_webhook_verifications_total", result="verified"
                ),
                "reviews opened": total(samples, "recon_reviews_opened_total"),
                "reviews open": total(samples, "recon_reviews_open"),
                "kafka intents accepted": total(
                    samples, "recon_kafka_intents_total", result="accepted"
                ),
                "kill switches engaged": total(samples, "recon_kill_switches_engaged"),
                "accepted to committed": total(
                    samples, "recon_accepted_to_committed_seconds_count"
                ),
                "http requests": total(
                    samples,
                    "recon_http_requests_total",
                    method="POST",
                    route="/v1/transactions",
                    status="202",
                ),
                "http request durations": total(
                    samples, "recon_http_request_seconds_count", route="/v1/transactions/{tx_id}"
                ),
                "decider transactions": total(samples, "recon_decider_transaction_seconds_count"),
                "oldest open review age": total(samples, "recon_oldest_open_review_seconds"),
            }
            if all(fed.values()) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.3)
        assert all(fed.values()), fed
        # Counted once per transition, by the projector, from the views it committed.
        assert total(samples, "recon_transactions_total", status="accepted") == 2
        assert total(samples, "recon_transactions_total", status="committed") == 1
        # Consumer lag is a gauge per group and partition: present for every consumer.
        lagging = {
            labels["group"].removeprefix(stack.topic_prefix)
            for name, labels, _ in samples
            if name == "recon_consumer_lag"
        }
        assert lagging >= {
            "recon-decider",
            "recon-projector",
            "recon-saga",
            "recon-intents",
        }, lagging
        # Present while nothing is unknown (0), as a gauge an alert can compare.
        assert any(name == "recon_oldest_unknown_operation_seconds" for name, _, _ in samples)
        # The one decider reports the one switch its dispatch gate acts on; no other process
        # sets it.
        assert total(samples, "recon_kill_switches_engaged") == 1.0
    finally:
        await producer.stop()
        await recon.close()
