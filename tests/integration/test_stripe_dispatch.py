"""The dispatcher speaks Stripe through the adapter its configuration names, and a
redelivered Stripe call is settled by the adapter's `replay` lookup: the dispatch's own
payload resent under its key inside Stripe's retention (Stripe answers the first answer,
nothing new is made), never resent past it (issue 20, items 1 and 5).

Real Kafka and Postgres (the dispatcher's gate and `calls_begun`), the production
dispatcher and adapter, the stateful Stripe fake as the provider.
"""

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from support.begun_by import DEAD_HOLDER, LAPSED_S
from support.kafka_executor import KafkaExecutor
from support.stripe_fake import API_KEY, RETENTION_S, StripeFake, running_fake

from events.definition import Leg
from events.envelope import GENESIS_HASH, Envelope, seal
from events.topics import Topics
from events.transaction_events import OperationDispatched
from services.config import Settings
from services.dispatcher import calls_begun
from services.kafka_setup import ensure_topics
from services.providers.accounts import Account
from services.providers.http import ProviderHttp
from services.providers.registry import build_accounts
from services.providers.stripe.adapter import StripeAdapter

TENANT = "demo"
PAYLOAD = {"amount": 1250, "currency": "eur"}


@pytest.fixture
async def stripe(
    conn: asyncpg.Connection, kafka_bootstrap: str, fresh_database: str, topic_prefix: str
) -> AsyncIterator[tuple[KafkaExecutor, StripeFake]]:
    async with running_fake() as (fake, url), ProviderHttp(5.0, connect_s=2.0) as http:
        settings = Settings(
            kafka_bootstrap=kafka_bootstrap,
            database_url=fresh_database,
            topics=Topics(topic_prefix),
            environment="test",
            providers={"pay": url},
            provider_adapters={"pay": "stripe"},
            provider_secrets={"pay": API_KEY},
        )
        await ensure_topics(kafka_bootstrap, settings.topics)
        accounts = build_accounts(http, settings)
        dispatcher = KafkaExecutor(settings, accounts)
        await dispatcher.producer.start()
        try:
            yield dispatcher, fake
        finally:
            await dispatcher.gate.close()
            await dispatcher.producer.stop()


def intent_dispatch(
    tx_id: str, op_key: str, at: datetime, attempt: int = 1
) -> tuple[Envelope, OperationDispatched]:
    dispatch = OperationDispatched(
        action="pay",
        leg=Leg.FORWARD,
        op_key=op_key,
        attempt=attempt,
        lookup_first=False,
        provider="pay",
        operation="payment_intents.create",
        payload=PAYLOAD,
    )
    [envelope] = seal(
        tenant=TENANT,
        tx_id=tx_id,
        last_seq=0,
        last_hash=GENESIS_HASH,
        events=[dispatch],
        causation_id="test",
        occurred_at=at,
    )
    return envelope, dispatch


def intents_under(fake: StripeFake, key: str) -> list[str]:
    return [i["id"] for i in fake.intents.values() if i["metadata"].get("op_key") == key]


async def test_the_configured_adapter_makes_the_call_and_a_redelivery_is_a_replay(
    stripe: tuple[KafkaExecutor, StripeFake],
) -> None:
    dispatcher, fake = stripe
    assert isinstance(
        getattr(dispatcher.accounts.adapters[Account("pay")], "inner", None), StripeAdapter
    )
    envelope, dispatch = intent_dispatch("stripe-1", "k_stripe_replay", datetime.now(UTC))
    await dispatcher.call(envelope, dispatch, 0)
    assert len(intents_under(fake, "k_stripe_replay")) == 1
    assert await dispatcher.gate.was_begun(envelope, dispatch)

    # Redelivered (its call was begun): it looks up first, and for Stripe inside the
    # retention the lookup is the identical request, answered from Stripe's saved answer.
    await dispatcher.call(envelope, dispatch, 0)
    assert fake.replayed == 1
    assert len(intents_under(fake, "k_stripe_replay")) == 1


async def test_a_redelivery_past_the_retention_is_never_resent(
    conn: asyncpg.Connection, stripe: tuple[KafkaExecutor, StripeFake]
) -> None:
    dispatcher, fake = stripe
    # The call was begun (and made) more than Stripe's retention ago: the key is pruned,
    # and the same request now would be a second payment.
    long_ago = datetime.now(UTC) - timedelta(seconds=RETENTION_S + 3600)
    envelope, dispatch = intent_dispatch("stripe-2", "k_stripe_pruned", long_ago)
    assert (
        await calls_begun.begin(
            conn,
            tenant=TENANT,
            tx_id="stripe-2",
            op_key="k_stripe_pruned",
            leg="forward",
            attempt=1,
            agent_id="agent-7",
            provider="pay",
            operation="payment_intents.create",
            holder=DEAD_HOLDER,
            lease_s=LAPSED_S,
            fence=None,
        )
    ).written
    made = await dispatcher.accounts.adapters[Account("pay")].apply(
        dispatch.operation, dispatch.op_key, PAYLOAD
    )
    fake.clock.advance(RETENTION_S + 3600)
    executed = fake.executed

    await dispatcher.call(envelope, dispatch, 0)
    # Found by its metadata, not resent: nothing executed, nothing replayed.
    assert (fake.executed, fake.replayed) == (executed, 0)
    assert intents_under(fake, "k_stripe_pruned") == [made.remote_id]


async def test_a_later_attempt_is_never_replayed_its_key_may_be_older_than_its_dispatch(
    stripe: tuple[KafkaExecutor, StripeFake],
) -> None:
    """The key is the leg's, every attempt's: the first send under it was attempt 1's, older
    than attempt 2's dispatch, so attempt 2's time cannot bound the key's age."""
    dispatcher, fake = stripe
    envelope, dispatch = intent_dispatch("stripe-3", "k_stripe_later", datetime.now(UTC), 2)
    made = await dispatcher.accounts.adapters[Account("pay")].apply(
        dispatch.operation, dispatch.op_key, PAYLOAD
    )
    replayed = fake.replayed
    # lookup_first: a later attempt after an unknown looks before it applies.
    looking = dispatch.model_copy(update={"lookup_first": True})
    await dispatcher.call(envelope, looking, 0)
    assert fake.replayed == replayed
    assert intents_under(fake, "k_stripe_later") == [made.remote_id]
