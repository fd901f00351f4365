"""A policy is in force for every submission accepted after its PUT answered, even when a
dispatcher's cached view of the policies predates the PUT (it is re-read every 0.2 s, and
a decision may use a view up to 0.5 s old). Seen in CI: a burst of 200 charges submitted
right after the quota was installed let a fourth charge through a quota of three, on a
view without the policy.

The intake writes on the intent row the policy version it checked the submission under;
the dispatcher's gate re-reads the policies when that version is newer than its own."""

from datetime import UTC, datetime

import asyncpg

from events.definition import Leg, OperationKind, OperationSpec
from events.envelope import GENESIS_HASH, seal
from events.policy import AgentPolicy, PolicyDocument
from events.topics import Topics
from events.transaction_events import OperationDispatched
from services.config import Settings
from services.dispatcher.gatekeeper import Gatekeeper
from services.governance import store
from services.intake import intents
from services.kafka_clients import acked_producer
from services.kafka_setup import ensure_topics

TENANT, TX, AGENT = "demo", "fresh-1", "agent-7"


async def test_a_dispatch_is_judged_by_the_policy_its_submission_was_checked_under(
    kafka_bootstrap: str, fresh_database: str, topic_prefix: str
) -> None:
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap,
        database_url=fresh_database,
        topics=Topics(topic_prefix),
        environment="test",
    )
    await ensure_topics(kafka_bootstrap, settings.topics)
    producer = acked_producer(settings, "test")
    await producer.start()
    gate = Gatekeeper(settings, producer)
    conn = await asyncpg.connect(fresh_database)
    try:
        await gate.refresh()  # the dispatcher's view: no policy for the tenant
        assert gate.policies == {}

        # The operator installs version 1 (charges not granted to agent-7); the agent
        # submits at once, checked by the intake under version 1.
        document = PolicyDocument(
            version=1, agents={AGENT: AgentPolicy(grants=("payments.refund",))}
        )
        async with conn.transaction():
            assert await store.replace_policy(conn, TENANT, document, "ops@example.com")
        spec = OperationSpec(
            action="charge",
            kind=OperationKind.STEP,
            provider="sandbox",
            operation="payments.charge",
            payload={"amount": 1299},
            op_key="rk1_fresh",
        )
        intent = intents.Intent(TENANT, TX, "f" * 64, AGENT, (spec,), policy_version=1)
        await intents.claim(conn, intent, horizon_s=60)

        dispatch = OperationDispatched(
            action="charge",
            leg=Leg.FORWARD,
            op_key="rk1_fresh",
            attempt=1,
            lookup_first=False,
            provider="sandbox",
            operation="payments.charge",
            payload={"amount": 1299},
        )
        [envelope] = seal(
            tenant=TENANT,
            tx_id=TX,
            last_seq=0,
            last_hash=GENESIS_HASH,
            events=[dispatch],
            causation_id="test",
            occurred_at=datetime.now(UTC),
        )
        # Well within the gate's staleness bound: without the version check the cached
        # view (no policy) would let the charge through.
        assert not await gate.clear(envelope, dispatch, partition=0)
        assert gate.policies[TENANT].version == 1
    finally:
        await conn.close()
        await gate.close()
        await producer.stop()
