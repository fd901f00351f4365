"""A process whose start fails part-way stops every Kafka client and closes every Postgres
pool it opened before the failure (services.closing): the intake's lifespan, the projector,
the reconciler, the Kafka intents reader, the CLI's log readers (audit verify, bundle,
compare, a transaction's window); and the intake's group watch and the dispatch gate close
their second reader or pool when closing the first fails. On the session's real
broker and Postgres; the failing step is a real client's start (tests/support/
failing_start.py), the broker's address refusing, or a real close raising once done."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError
from conftest import Infra
from support.failing_start import StartRefused, fail_start
from support.intake_app import intake_settings
from support.kafka_leaks import unstopped

from events.topics import Topics
from services import kafka_start
from services.cli.log_snapshot import open_partitions, open_snapshot
from services.cli.partition_reader import open_reader
from services.config import Settings
from services.dispatcher.gatekeeper import Gatekeeper
from services.intake.app import create_app
from services.intake.group_positions import Standing
from services.intake.group_watch import GroupWatch
from services.intake.health import admin_client
from services.intake.kafka_intents import IntentSubscriber
from services.kafka_clients import acked_producer, client_id
from services.kafka_setup import ensure_topics
from services.projector.runtime import Projector
from services.pull_reconciler.runtime import open_reconciler

pytestmark = pytest.mark.timeout(120)

INTAKE = ("intake-producer", "intake-health", "intake-watch", "intake-progress")


def _left_open(*roles: str) -> dict[str, int]:
    """The clients of each role not stopped, counted; {} when every one was."""
    return {role: n for role in roles if (n := len(unstopped(client_id(role))))}


async def _connections(url: str, wait_s: float = 10.0) -> int:
    """Connections to `url`'s database but this one, once those closed have gone (a closed
    pool's backends end a moment after its close returns), or after `wait_s`."""
    conn = await asyncpg.connect(url)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            count: int = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            if count == 0 or loop.time() > deadline:
                return count
            await asyncio.sleep(0.05)
    finally:
        await conn.close()


def _refusing() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _settings(infra: Infra, database_url: str, topic_prefix: str, bootstrap: str = "") -> Settings:
    return Settings(
        kafka_bootstrap=bootstrap or infra.kafka_bootstrap,
        database_url=database_url,
        topics=Topics(topic_prefix),
        environment="test",
    )


@pytest.mark.parametrize("role", ["intake-producer", "intake-health"])
async def test_an_intake_whose_kafka_client_fails_to_start_stops_every_client(
    role: str,
    infra: Infra,
    fresh_database: str,
    topic_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = await intake_settings(infra, fresh_database, topic_prefix)
    fail_start(monkeypatch, role)
    app = create_app(settings)
    # `failed` holds the failed start's frames, and so every client it made, to the end:
    # a client dropped unstopped is collected, not stopped (aiokafka only logs it then).
    with pytest.raises(StartRefused) as failed:
        async with app.router.lifespan_context(app):
            pass
    assert _left_open(*INTAKE) == {}, failed
    assert await _connections(fresh_database) == 0


async def test_an_intake_whose_later_step_fails_stops_every_client(
    infra: Infra, fresh_database: str, topic_prefix: str, tmp_path: Path
) -> None:
    # The policy file is read after the clients started and the group watch runs.
    policy = tmp_path / "policy.json"
    policy.write_text("[]")
    settings = await intake_settings(infra, fresh_database, topic_prefix, policy_file=str(policy))
    app = create_app(settings)
    with pytest.raises(ValueError, match="expected an object") as failed:
        async with app.router.lifespan_context(app):
            pass
    assert _left_open(*INTAKE) == {}, failed
    assert await _connections(fresh_database) == 0


@pytest.fixture
def settings(infra: Infra, fresh_database: str, topic_prefix: str) -> Settings:
    return _settings(infra, fresh_database, topic_prefix)


async def test_a_projector_whose_consumer_fails_to_start_stops_its_dead_letter_producer(
    settings: Settings, fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ensure_topics(settings.kafka_bootstrap, settings.topics)
    # The dead letters' producer starts first, for real; then the consumer's start fails.
    fail_start(monkeypatch, "projector-inputs")
    projector = Projector(settings, asyncio.Event())
    with pytest.raises(StartRefused):
        await projector.run()
    assert _left_open("projector-inputs", "projector-dead-letters") == {}
    assert await _connections(fresh_database) == 0


async def test_a_reconciler_whose_producer_fails_to_start_stops_it(
    settings: Settings, fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_start(monkeypatch, "reconciler-producer")
    with pytest.raises(StartRefused) as failed:
        async with open_reconciler(settings):
            pass
    assert _left_open("reconciler-producer") == {}, failed
    assert await _connections(fresh_database) == 0


async def test_a_kafka_intents_reader_whose_producer_fails_to_start_stops_its_consumer(
    infra: Infra, fresh_database: str, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A refused connection is retried as a broker not up yet, for START_TIMEOUT_S (60 s):
    # the same path, retried for a second, is the test (the wait was a minute of the suite).
    monkeypatch.setattr(kafka_start, "START_TIMEOUT_S", 1.0)
    settings = _settings(infra, fresh_database, topic_prefix, bootstrap=_refusing())
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=1)
    try:
        reader = IntentSubscriber(settings, pool, ["acme"])
        with pytest.raises(KafkaConnectionError):
            await reader.run(asyncio.Event())
    finally:
        await pool.close()
    assert _left_open("intents-producer", "intents-inputs") == {}


_TP = TopicPartition("recon.events", 0)
CLI_READERS: dict[str, tuple[str, Callable[[str], AbstractAsyncContextManager[Any]]]] = {
    "open_snapshot": ("log-snapshot", lambda bootstrap: open_snapshot(bootstrap, [_TP.topic])),
    "open_partitions": (
        "log-snapshot",
        lambda bootstrap: open_partitions(bootstrap, {_TP: 0}, {_TP: 1}),
    ),
    "open_reader": ("log-reader", lambda bootstrap: open_reader(bootstrap, [_TP.topic])),
}


@pytest.mark.parametrize("opener", sorted(CLI_READERS))
async def test_a_cli_log_reader_whose_consumer_fails_to_start_stops_it(
    opener: str, infra: Infra, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A one-off's failed start left its consumer's connections and metadata task to the
    # process's exit, and aiokafka's "Unclosed AIOKafkaConsumer" in the operator's terminal.
    role, opened = CLI_READERS[opener]
    fail_start(monkeypatch, role)
    with pytest.raises(StartRefused) as failed:
        async with opened(infra.kafka_bootstrap):
            pass
    assert _left_open(role) == {}, failed


async def test_a_group_watch_whose_first_reader_fails_to_close_closes_the_second(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ensure_topics(settings.kafka_bootstrap, settings.topics)
    admin = admin_client(settings)
    await admin.start()
    try:
        watch = GroupWatch(admin, settings)
        tp = TopicPartition(settings.topics.events, 0)
        # Both readers started, as the watch's follow starts them.
        await watch._positions.records([tp])
        await watch._gaps.read({tp: Standing(0, 0)})
        assert len(unstopped(client_id("intake-watch"))) == 1
        assert len(unstopped(client_id("intake-progress"))) == 1
        real_close = watch._positions.close

        async def close_then_fail() -> None:
            await real_close()
            raise RuntimeError("the offsets reader's stop failed")

        monkeypatch.setattr(watch._positions, "close", close_then_fail)
        with pytest.raises(RuntimeError, match="offsets reader"):
            await watch.close()
        assert _left_open("intake-watch", "intake-progress") == {}
    finally:
        await admin.close()


async def test_a_gate_whose_first_pool_fails_to_close_closes_the_second(
    settings: Settings, fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer = acked_producer(settings, "gate-test")  # never started: the gate only holds it
    gate = Gatekeeper(settings, producer)
    try:
        first = await gate._pool()
        await gate._begin_pool()
        assert await _connections(fresh_database, wait_s=0) == 2
        real_close = asyncpg.Pool.close

        async def close(pool: asyncpg.Pool) -> None:
            await real_close(pool)
            if pool is first:
                raise RuntimeError("the gate's pool failed to close")

        monkeypatch.setattr(asyncpg.Pool, "close", close)
        with pytest.raises(RuntimeError, match="failed to close"):
            await gate.close()
        assert await _connections(fresh_database) == 0
    finally:
        await producer.stop()
