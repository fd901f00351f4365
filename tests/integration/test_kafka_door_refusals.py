"""The Kafka door answers every intent and keeps going (issue 18, item 3): an ungranted
intent is refused on the reply topic (403 `not_granted`, as over HTTP) and an intent whose
judging fails in a way nobody foresaw is answered (500 `internal_error`) and dead-lettered;
neither stops the door, so the next intent is still accepted. Real Kafka and Postgres; the
door runs as `run_intents`, the process's own entry point, in the test's event loop.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from support.governance_support import charge
from support.intake_app import intake_settings
from support.intent_door import door, replies
from support.topic_records import read_records

from events.policy import PolicyDocument
from services.config import Settings
from services.governance import store
from services.intake import kafka_intents
from services.intake.accept import accept_submission

# agent-7 may refund, not charge.
POLICY = {"version": 1, "agents": {"agent-7": {"grants": ["payments.refund"]}}}
GRANTED = {"version": 1, "agents": {"agent-7": {"grants": ["payments.charge", "payments.refund"]}}}


async def install(settings: Settings, document: dict[str, Any]) -> None:
    conn = await asyncpg.connect(settings.database_url)
    try:
        assert await store.replace_policy(
            conn, "acme", PolicyDocument.model_validate(document), "ops"
        )
    finally:
        await conn.close()


async def test_an_ungranted_intent_is_refused_403_and_the_door_keeps_answering(
    infra: Any, fresh_database: str, topic_prefix: str
) -> None:
    settings = await intake_settings(infra, fresh_database, topic_prefix)
    await install(settings, POLICY)
    async with door(settings) as (produce, task):
        await produce("k-ungranted", charge("k-ungranted"))
        await produce("k-refund-only", charge("k-refund-only", agent_id="agent-other"))
        answered = await replies(settings, {"k-ungranted", "k-refund-only"})
        assert not task.done(), task  # the door is still up
    refusal = answered["k-ungranted"]
    assert (refusal["status"], refusal["http_status"], refusal["error"]) == (
        "refused",
        403,
        "not_granted",
    ), refusal
    assert "payments.charge" in refusal["message"]
    # Refused before anything was recorded: no intent row, no command.
    conn = await asyncpg.connect(settings.database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM intents WHERE tx_id = 'k-ungranted'") == 0
    finally:
        await conn.close()
    commands = await read_records(settings.kafka_bootstrap, settings.topics.commands)
    assert not [r for r in commands if r.value and b"k-ungranted" in r.value]


async def test_an_unforeseen_failure_is_answered_and_dead_lettered_not_a_crash_loop(
    infra: Any, fresh_database: str, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = await intake_settings(infra, fresh_database, topic_prefix)
    await install(settings, GRANTED)

    async def buggy(state: Any, tenant: str, raw: bytes, **kw: Any) -> dict[str, Any]:
        # A bug nobody foresaw, for one body only: the fault injected is the bug itself.
        if b"k-bug" in raw:
            raise ZeroDivisionError("division by zero")
        return await accept_submission(state, tenant, raw, **kw)

    monkeypatch.setattr(kafka_intents, "accept_submission", buggy)
    async with door(settings) as (produce, task):
        await produce("k-bug", charge("k-bug"))
        await produce("k-after", charge("k-after"))
        answered = await replies(settings, {"k-bug", "k-after"})
        assert not task.done(), task
    bug = answered["k-bug"]
    assert (bug["http_status"], bug["error"]) == (500, "internal_error"), bug
    assert "ZeroDivisionError" in bug["message"]
    assert answered["k-after"]["status"] == "accepted", answered["k-after"]
    dead = await read_records(settings.kafka_bootstrap, settings.topics.dead_letters)
    assert [r.key for r in dead] == [b"acme/k-bug"], dead
    assert b"ZeroDivisionError" in dead[0].headers["reason"]
