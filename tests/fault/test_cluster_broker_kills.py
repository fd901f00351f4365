"""Three Kafka brokers (replication 3, min.insync 2) killed with -9 and restarted one at a
time while transactions arrive at a steady pace: the leader of a decider input partition,
then the active KRaft controller, then the node not killed yet, so every node (and with it
every partition leader, group and transaction coordinator) goes down once. Nothing lost,
nothing twice.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Infra
from support.cluster_support import partition_leader, wait_fully_replicated
from support.recon_client import Recon, transaction
from support.tests_support_log import read_event_log

from events.topics import Topics
from services.devtools.infra.kafka_cluster import KafkaCluster
from services.devtools.stack import SERVICES, Stack

BROKERS = 3
# The decider input partition whose leader is killed first.
WATCHED_PARTITION = 0


@pytest.fixture
def kafka_cluster(
    infra: Infra, tmp_path: Path, free_port: Callable[[], int]
) -> Iterator[KafkaCluster]:
    # Like the other broker tests: skipped when the infrastructure comes from outside.
    infra.require_kafka()
    cluster = KafkaCluster(
        tmp_path / "kafka",
        [free_port() for _ in range(BROKERS)],
        [free_port() for _ in range(BROKERS)],
    )
    cluster.start()
    try:
        yield cluster
    finally:
        # Its data is thrown away with tmp_path: no controlled shutdown to wait for.
        cluster.kill()


@pytest.fixture
async def cluster_stack(
    kafka_cluster: KafkaCluster,
    fresh_database: str,
    topic_prefix: str,
    tmp_path: Path,
    free_port: Callable[[], int],
) -> AsyncIterator[Stack]:
    stack = Stack(
        kafka_bootstrap=kafka_cluster.bootstrap,
        database_url=fresh_database,
        log_dir=tmp_path / "logs",
        topic_prefix=topic_prefix,
        intake_port=free_port(),
        sandbox_port=free_port(),
        extra_env={
            "RECON_PROVIDER_TIMEOUT_S": "2",
            "RECON_LOG_LEVEL": "INFO",
            "RECON_KAFKA_REPLICATION_FACTOR": "3",
            "RECON_KAFKA_MIN_INSYNC_REPLICAS": "2",
        },
    )
    stack.start_all()
    try:
        await stack.wait_ready(timeout=120)
        yield stack
    finally:
        stack.stop_all()
        for name in SERVICES:
            tail = stack.log_tail(name, 15)
            if tail:
                print(f"--- {name} ---\n{tail}")


class SteadyLoad:
    """Submits new transactions one after another, paced (about two a second, which two
    cores shared with three brokers keep up with), until stopped; remembers the answers."""

    def __init__(self, recon: Recon) -> None:
        self.recon = recon
        self.answers: dict[str, int] = {}
        self.stopping = asyncio.Event()
        self._next = 0

    async def _worker(self) -> None:
        while not self.stopping.is_set():
            tx_id = f"cluster-{self._next}"
            self._next += 1
            # 503 while Kafka cannot take the command: retried, as a client would.
            response = await self.recon.submit(transaction(tx_id), retry_unavailable=True)
            self.answers[tx_id] = response.status_code
            await asyncio.sleep(0.4)

    async def run(self) -> None:
        await self._worker()

    @property
    def accepted(self) -> list[str]:
        return [tx_id for tx_id, code in self.answers.items() if 200 <= code < 300]


async def _active_controller(cluster: KafkaCluster, timeout: float = 30) -> int:
    """The KRaft quorum leader, once the nodes agree there is one (not mid-election)."""
    deadline = time.monotonic() + timeout
    while (leader := await asyncio.to_thread(cluster.active_controller)) is None:
        assert time.monotonic() < deadline, "no active KRaft controller"
        await asyncio.sleep(0.3)
    return leader


async def _effects_grow(recon: Recon, by: int, timeout: float = 90) -> None:
    """Until the provider applied `by` more effects: recon makes progress right now."""
    start = len(await recon.effects())
    deadline = time.monotonic() + timeout
    while len(await recon.effects()) < start + by:
        assert time.monotonic() < deadline, f"no progress for {timeout:.0f}s"
        await asyncio.sleep(0.3)


# Three JVMs, a restart each and the whole stack on two cores: more than the 300 s default
# leaves under a loaded machine (it takes about three minutes).
@pytest.mark.timeout(480)
async def test_brokers_killed_one_at_a_time_lose_and_duplicate_nothing(
    kafka_cluster: KafkaCluster, cluster_stack: Stack
) -> None:
    stack, cluster = cluster_stack, kafka_cluster
    started = time.monotonic()
    recon = Recon(stack.intake_url, stack.sandbox_url)
    load = SteadyLoad(recon)
    running = asyncio.create_task(load.run())
    killed: list[str] = []
    victims_so_far: list[int] = []
    try:
        await _effects_grow(recon, 6)
        await wait_fully_replicated(cluster.bootstrap, BROKERS)
        commands = Topics(stack.topic_prefix).commands
        victims = [
            ("leader of a decider input partition", "partition"),
            ("active KRaft controller", "controller"),
            ("remaining node", "remaining"),
        ]
        for why, how in victims:
            if how == "partition":
                victim = await partition_leader(cluster.bootstrap, commands, WATCHED_PARTITION)
            elif how == "controller":
                victim = await _active_controller(cluster)
            else:
                victim = min({1, 2, 3} - set(victims_so_far))
            victims_so_far.append(victim)
            cluster.node(victim).kill()
            down = time.monotonic()
            # The survivors carry on: new effects are applied while the node is down.
            await _effects_grow(recon, 6)
            progress = time.monotonic()
            await asyncio.to_thread(cluster.node(victim).start)
            restarted = time.monotonic()
            # One at a time: the next kill waits until every copy is back in sync.
            await wait_fully_replicated(cluster.bootstrap, BROKERS)
            killed.append(
                f"node {victim} ({why}): progress {progress - down:.1f}s after the kill, "
                f"restarted in {restarted - progress:.1f}s, "
                f"in sync {time.monotonic() - restarted:.1f}s later"
            )
        await _effects_grow(recon, 6)
    finally:
        load.stopping.set()
        await running

    accepted = load.accepted
    assert accepted, load.answers
    assert set(load.answers.values()) <= {200, 202}, Counter(load.answers.values())
    statuses: Counter[str] = Counter()
    for tx_id in accepted:
        tx = await recon.wait_terminal(tx_id, timeout=120)
        statuses[tx["status"]] += 1
    assert statuses == {"committed": len(accepted)}, statuses

    # One effect per idempotency key at the provider, three per transaction.
    effects = Counter(e["idempotency_key"] for e in await recon.effects())
    assert len(effects) == 3 * len(accepted)
    assert set(effects.values()) == {1}, [k for k, n in effects.items() if n > 1]
    # And one apply per key: the provider dedupes a repeated key into the same effect, so
    # its call log is what shows whether a key was sent twice.
    calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for call in await recon.calls():
        calls[call["idempotency_key"]].append(call)
    assert set(calls) == set(effects)
    applies = Counter(
        tuple(c["outcome"] for c in key_calls if c["kind"] == "apply")
        for key_calls in calls.values()
    )
    assert applies == {("applied",): len(effects)}, applies

    # read_event_log checks every chain (hashes and contiguous seq from 1).
    log = await read_event_log(stack)
    assert set(log) == {("demo", tx_id) for tx_id in accepted}
    confirmed: Counter[tuple[str, str]] = Counter()
    blind: Counter[str] = Counter()
    redispatched = 0
    for (_, tx_id), envelopes in log.items():
        assert len({e.event_id for e in envelopes}) == len(envelopes), tx_id
        for envelope in envelopes:
            if envelope.type == "OperationConfirmed":
                confirmed[(tx_id, envelope.data["action"])] += 1
            elif envelope.type == "OperationDispatched" and envelope.data["lookup_first"]:
                # A later attempt after the reconciler found nothing yet (the dispatcher was
                # held up by the broker loss): it looks the key up before applying.
                redispatched += 1
            elif envelope.type == "OperationDispatched":
                blind[envelope.data["op_key"]] += 1
    # Each operation applied blind at most once, under the key the provider saw, and
    # confirmed once.
    assert set(blind) == set(effects)
    assert set(blind.values()) == {1}, Counter(blind.values())
    assert len(confirmed) == len(effects) and set(confirmed.values()) == {1}
    await recon.close()
    print(
        f"cluster run: killed {killed}; {len(accepted)} transactions, {len(effects)} effects, "
        f"{redispatched} re-dispatches with lookup first, "
        f"{sum(len(c) for c in calls.values()) - len(effects)} lookups, "
        f"{time.monotonic() - started:.0f}s"
    )
