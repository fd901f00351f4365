"""Issue 18, item 4: a review request that never takes effect (no decider acts on it: here
none runs, as for one that dead-letters it) is asked again with a doubling wait, and after
the policy's number of requests no more. The reconciler then gives the leg up once, loudly,
and the gauge an operator alerts on counts it while the leg stays in flight. Real Postgres
and Kafka; the reconciler's clock is moved by the test."""

import logging
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from prometheus_client import REGISTRY
from support.topic_records import read_topic

from events.topics import Topics
from reconcilers.pull import Policy
from services.config import ReconcilerSettings, Settings
from services.pull_reconciler.gauges import refresh_gauges
from services.pull_reconciler.runtime import open_reconciler

KEY = "k_stranded"


async def test_a_review_request_that_never_takes_effect_is_asked_a_bounded_number_of_times(
    kafka_bootstrap: str,
    fresh_database: str,
    topic_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topics = Topics(topic_prefix)
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=fresh_database,
        topics=topics,
        environment="test",
        providers={},
        reconciler=ReconcilerSettings(budget=2, review_retry_s=60),
    )
    start = datetime.now(UTC)
    clock = [start]
    async with open_reconciler(settings) as reconciler:
        reconciler.clock = lambda: clock[0]
        policy: Policy = reconciler.policy
        async with reconciler.pool.acquire() as conn:
            # A charge the dispatcher left `unknown`, its lookups spent.
            await conn.execute(
                "INSERT INTO operations (tenant, tx_id, action, position, kind, provider,"
                " operation, op_key, state, attempts, evidence, updated_at)"
                " VALUES ('demo', 'tx-stranded', 'charge', 0, 'step', 'sandbox',"
                " 'payments.charge', $1, 'unknown', 1, '[]', $2)",
                KEY,
                start - timedelta(hours=1),
            )
            await conn.execute(
                "INSERT INTO reconciler_leases (op_key, attempt, lookups, next_at, updated_at)"
                " VALUES ($1, 1, 2, $2, $2)",
                KEY,
                start - timedelta(minutes=1),
            )
        # When the reconciler ticks every minute for four hours (past the last request's
        # capped wait) and nothing acts on its requests,
        with caplog.at_level(logging.ERROR, logger="services.pull_reconciler.runtime"):
            for minute in range(0, 4 * 60):
                clock[0] = start + timedelta(minutes=minute)
                await reconciler.tick()
        await refresh_gauges(reconciler.pool)
        async with reconciler.pool.acquire() as conn:
            lease = await conn.fetchrow(
                "SELECT review_requests, given_up_at FROM reconciler_leases WHERE op_key = $1",
                KEY,
            )

    # then it asked the policy's number of times, each wait twice the last up to the cap,
    requests = [
        datetime.fromisoformat(c["issued_at"])
        for c in await read_topic(kafka_bootstrap, topics.commands)
        if c["type"] == "RequestReview"
    ]
    assert len(requests) == policy.review_requests == lease["review_requests"]
    waits = [(b - a) for a, b in pairwise(requests)]
    assert waits == [policy.review_wait(n) for n in range(1, policy.review_requests)]
    # gave the leg up once, loudly, and the gauge counts it while it stays in flight.
    assert lease["given_up_at"] is not None
    loud = [r for r in caplog.records if r.levelno == logging.ERROR and "!!!" in r.getMessage()]
    assert len(loud) == 1 and "tx-stranded" in loud[0].getMessage()
    assert REGISTRY.get_sample_value("recon_reconciler_legs_given_up") == 1
