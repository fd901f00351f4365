"""A process asked to stop while one of its Kafka clients waits inside its start for a frozen
broker stops at once (its start raced with the process's stop, services.kafka_start) and
leaves every client it made stopped: the projector's consumer, the reconciler's producer and
the intents reader's producer, which started without watching the stop until stop 54 (and
open_reconciler, which then handed out a reconciler whose producer never started; and the
intake, whose start-up in FastAPI's lifespan watched no stop until stop 55); and a process
asked to stop during its topic set-up (services.kafka_setup), which waited out its 60 s and
exited with the error.

The broker is the session's own, frozen (SIGSTOP) as the client's real start begins: it takes
the bootstrap's connection and answers nothing, so aiokafka waits the request's 40 s an
attempt (tests/fault/test_kafka_stop_frozen.py for the consumer's own stop)."""

import asyncio
import contextlib
import dataclasses
import socket
import time
from collections.abc import Callable, Coroutine
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from conftest import Infra
from support.broker_faults import frozen, process_state
from support.intake_app import intake_settings
from support.kafka_leaks import unstopped
from support.stop_timing import WAITING_S, sigterm_exits_cleanly, stopped_while_waiting

from services.config import Settings
from services.decider.runtime import run_decider
from services.devtools.infra import KafkaBroker
from services.devtools.stack import Stack
from services.intake.__main__ import serve_intake
from services.intake.kafka_intents import IntentSubscriber
from services.kafka_clients import client_id
from services.projector.runtime import Projector
from services.pull_reconciler.runtime import open_reconciler, run_reconciler
from services.saga.runtime import run_saga
from services.stop_race import StoppedStarting

pytestmark = pytest.mark.timeout(180)

# The cancelled start and the stops of clients that never reached the broker take ms.
STOP_BOUND_S = 5.0

Run = Callable[[Settings, asyncio.Event], Coroutine[Any, Any, None]]


async def _projector(settings: Settings, stop: asyncio.Event) -> None:
    await Projector(settings, stop).run()


async def _intents_reader(settings: Settings, stop: asyncio.Event) -> None:
    pool = await asyncpg.create_pool(settings.database_url, min_size=1, max_size=1)
    try:
        await IntentSubscriber(settings, pool, ["acme"]).run(stop)
    finally:
        await pool.close()


async def _reconciler_opened(settings: Settings, stop: asyncio.Event) -> None:
    """open_reconciler itself, which the CLI's scan opens too, not run_reconciler's own check
    of the stop: a reconciler whose producer never started is handed to nobody."""
    with contextlib.suppress(StoppedStarting):
        async with open_reconciler(settings, stop) as reconciler:
            started = reconciler.producer._sender.sender_task is not None
            raise AssertionError(f"a reconciler handed out after the stop (started: {started})")


async def _intake(settings: Settings, stop: asyncio.Event) -> None:
    """The intake's process as `python -m services.intake` runs it, on a port of its own:
    its start-up (FastAPI's lifespan) watched no stop until stop 55."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    await serve_intake(dataclasses.replace(settings, intake_port=port), stop)


PROCESSES: dict[str, tuple[Run, str, tuple[str, ...]]] = {
    # The run, the role whose start meets the frozen broker, every role it makes.
    "projector": (_projector, "projector-inputs", ("projector-inputs", "projector-dead-letters")),
    "reconciler": (run_reconciler, "reconciler-producer", ("reconciler-producer",)),
    "reconciler opened": (_reconciler_opened, "reconciler-producer", ("reconciler-producer",)),
    "intents reader": (_intents_reader, "intents-producer", ("intents-producer", "intents-inputs")),
    "intake": (_intake, "intake-producer", ("intake-producer", "intake-health")),
}


def _freeze_at_start(
    monkeypatch: pytest.MonkeyPatch, broker: KafkaBroker, role: str, back: ExitStack
) -> asyncio.Event:
    """The broker frozen as the real start of `role`'s client begins; set once it is."""
    away = asyncio.Event()
    for kind in (AIOKafkaConsumer, AIOKafkaProducer):
        real = kind.start

        async def start(self: Any, real: Any = real) -> None:
            inner = self.client if isinstance(self, AIOKafkaProducer) else self._client
            if inner._client_id == client_id(role) and not away.is_set():
                back.enter_context(frozen(broker))
                away.set()
            await real(self)

        monkeypatch.setattr(kind, "start", start)
    return away


@pytest.mark.parametrize("process", sorted(PROCESSES))
async def test_a_process_stopped_while_a_client_starts_against_a_frozen_broker_stops_at_once(
    process: str,
    infra: Infra,
    kafka_broker: KafkaBroker,
    fresh_database: str,
    topic_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run, role, roles = PROCESSES[process]
    settings = await intake_settings(infra, fresh_database, topic_prefix)
    stop = asyncio.Event()
    with ExitStack() as back:
        away = _freeze_at_start(monkeypatch, kafka_broker, role, back)
        task = asyncio.create_task(run(settings, stop))
        await _stops_at_once(process, task, stop, away, back, kafka_broker)
    assert {r: n for r in roles if (n := len(unstopped(client_id(r))))} == {}


async def _stops_at_once(
    process: str,
    task: "asyncio.Task[None]",
    stop: asyncio.Event,
    away: asyncio.Event,
    back: ExitStack,
    broker: KafkaBroker,
) -> None:
    """`task` asked to stop once the broker is away, ended within the bound; then the
    broker back (`back` closed) and the task's end awaited whatever the verdict."""
    try:
        try:
            await stopped_while_waiting(task, stop, away, STOP_BOUND_S, process)
        except AssertionError as failed:
            # Once (CI on 9cb3f99) the reconciler's producer started within the second the
            # broker was meant to be frozen: whether it was, the kernel says.
            state = process_state(broker)
            raise AssertionError(f"{failed} (the broker's process state: {state})") from None
        task.result()
    finally:
        stop.set()
        await asyncio.to_thread(back.close)
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 60)


SET_UP: dict[str, Run] = {
    "saga": run_saga,
    "decider": run_decider,
    "projector": _projector,
    "intake": _intake,
}


@pytest.mark.parametrize("process", sorted(SET_UP))
async def test_a_process_stopped_during_its_topic_set_up_against_a_frozen_broker_stops_at_once(
    process: str, infra: Infra, kafka_broker: KafkaBroker, fresh_database: str, topic_prefix: str
) -> None:
    settings = await intake_settings(infra, fresh_database, topic_prefix)
    stop, away = asyncio.Event(), asyncio.Event()
    with ExitStack() as back:
        back.enter_context(frozen(kafka_broker))
        away.set()
        task = asyncio.create_task(SET_UP[process](settings, stop))
        await _stops_at_once(process, task, stop, away, back, kafka_broker)
    assert len(unstopped(client_id("setup"))) == 0


async def test_the_intake_process_sent_sigterm_during_its_start_up_exits_at_once(
    kafka_broker: KafkaBroker,
    fresh_database: str,
    topic_prefix: str,
    tmp_path: Path,
    free_port: Callable[[], int],
) -> None:
    """The intake as its own process (`python -m services.intake`), sent SIGTERM while its
    topic set-up waits for the frozen broker: the signal, not a test's event, is the stop,
    and the process exits cleanly (status 0) without serving."""
    stack = Stack(
        kafka_bootstrap=kafka_broker.bootstrap,
        database_url=fresh_database,
        log_dir=tmp_path / "logs",
        topic_prefix=topic_prefix,
        intake_port=free_port(),
    )
    with frozen(kafka_broker):
        process = stack.start("intake")
        try:
            # In its lifespan: its pools open (after the schema check), topic set-up next.
            await _until(lambda: _connections(fresh_database), 2, 60, stack)
            await asyncio.sleep(WAITING_S)
            await sigterm_exits_cleanly(
                process, STOP_BOUND_S, "intake process", lambda: stack.log_tail("intake")
            )
        finally:
            stack.stop_all()


async def _connections(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return count
    finally:
        await conn.close()


async def _until(
    probe: Callable[[], Coroutine[Any, Any, int]], at_least: int, timeout: float, stack: Stack
) -> None:
    deadline = time.monotonic() + timeout
    while await probe() < at_least:
        assert time.monotonic() < deadline, stack.log_tail("intake")
        await asyncio.sleep(0.1)
