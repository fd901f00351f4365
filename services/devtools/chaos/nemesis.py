"""The nemesis: a seeded plan of faults, and the code that carries it out on the real stack.

The plan is computed from the seed alone (what, to whom, after how many submissions, how
long down), so a run is reproducible as far as real processes allow: the same faults hit
the same processes at the same point of the workload; what is in flight at that instant
is up to the scheduler.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from services.devtools.infra._process import InfraError
from services.devtools.stack import Stack

# Every recon process the run starts; two deciders (each dispatching what it commits) share
# the partitions.
RECON_PROCESSES = (
    "decider",
    "decider-2",
    "saga",
    "projector",
    "reconciler",
    "intake",
)
SANDBOX_FAULTS: tuple[dict[str, Any], ...] = (
    {"operation": "payments.charge", "mode": "error_500_after_commit", "times": 2},
    {"operation": "inventory.reserve", "mode": "error_500_before_commit", "times": 2},
    {"operation": "payments.refund", "mode": "lose_response_after_commit", "times": 1},
    {"operation": "inventory.release", "mode": "error_500_after_commit", "times": 1},
    {"operation": "email.send", "mode": "lose_response_after_commit", "times": 1},
    {"mode": "lookup_unavailable", "times": 3},
    {"operation": "payments.charge", "mode": "delay", "times": 3, "delay_ms": 2500},
    {"mode": "webhook_delay", "times": 3, "delay_ms": 3000},
)


# Starts of a broker or the database before the nemesis gives up (each waits up to the
# infrastructure's own start timeout).
START_TRIES = 5
# The wait before the second start, doubled before each next one (2, 4, 8, 16 s: 30 s in
# all). A start refused at once needs it: a database killed with -9 and started again at
# once found its port still held ("port ... is already in use", the killed processes not
# all gone), and five starts without a pause gave up within milliseconds, leaving the run's
# Postgres down for every test after it. A kill now waits for its whole group
# (services.devtools.infra._process.wait_group_gone); the pause stays for any other start
# refused at once.
RETRY_WAIT_S = 2.0


class Server(Protocol):
    """KafkaBroker and PostgresServer (services.devtools.infra)."""

    def is_running(self) -> bool: ...
    def kill(self) -> None: ...
    def start(self) -> None: ...
    def restart(self) -> None: ...


@dataclass(frozen=True)
class Action:
    at_submission: int  # fires once this many submissions have begun
    kind: str  # kill | kafka | postgres | fault
    target: str = ""
    crash: bool = False  # kafka/postgres: kill -9 instead of a clean restart
    down_s: float = 0.0
    fault: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        match self.kind:
            case "kill":
                return f"kill -9 {self.target}, back after {self.down_s:.1f}s"
            case "fault":
                return f"arm sandbox fault {self.fault}"
            case _:
                how = "kill -9" if self.crash else "restart"
                return f"{how} {self.kind}" + (f", back after {self.down_s:.1f}s" * self.crash)


def plan(seed: int, transactions: int, faults: int, broker_faults: int = 1) -> list[Action]:
    rng = random.Random(f"nemesis-{seed}")
    # At least `broker_faults` broker and one database restart in any run of 3 faults or
    # more (a cluster run asks for one per node); beyond that, mostly process kills and
    # sandbox faults, with more restarts in longer runs.
    kinds: list[str] = ["kafka"] * broker_faults + ["postgres"] if faults >= 3 else []
    while len(kinds) < faults:
        kinds += rng.choices(["kill", "fault", "kafka", "postgres"], [0.5, 0.34, 0.08, 0.08])
    rng.shuffle(kinds)
    targets = list(RECON_PROCESSES)
    rng.shuffle(targets)
    kills = 0
    lo, hi = max(1, transactions // 20), max(2, transactions * 9 // 10)
    moments = sorted(rng.randint(lo, hi) for _ in kinds)
    actions = []
    for moment, kind in zip(moments, kinds, strict=True):
        if kind == "kill":
            target = targets[kills % len(targets)]
            kills += 1
            actions.append(Action(moment, kind, target, down_s=round(rng.uniform(0.2, 3.0), 1)))
        elif kind == "fault":
            actions.append(Action(moment, kind, fault=dict(rng.choice(SANDBOX_FAULTS))))
        else:
            crash = rng.random() < 0.5
            actions.append(Action(moment, kind, crash=crash, down_s=round(rng.uniform(0, 2), 1)))
    return actions


class Nemesis:
    """Carries out a plan. Processes it kills are restarted by itself; any other exit is
    noticed by `supervise` (a crash the run did not cause), restarted and reported."""

    def __init__(
        self,
        stack: Stack,
        kafka: Server | None,
        postgres: Server | None,
        actions: list[Action],
        log: Callable[[str], None] = print,
        retry_wait_s: float = RETRY_WAIT_S,
    ) -> None:
        self.stack, self.kafka, self.postgres = stack, kafka, postgres
        self.retry_wait_s = retry_wait_s
        self.actions = actions
        self.log = log
        self.down: set[str] = set()
        self.unexpected_exits: list[str] = []
        self.done: list[str] = []

    async def run(self, started: Callable[[], int]) -> None:
        """Fire each action when its moment comes, without waiting for the previous one to
        finish (a broker restart takes seconds; the kills planned meanwhile still happen);
        actions on the same target wait for each other."""
        locks: dict[str, asyncio.Lock] = {}
        tasks = []
        for number, action in enumerate(self.actions, 1):
            while started() < action.at_submission:
                await asyncio.sleep(0.05)
            self.log(f"  nemesis {number}/{len(self.actions)} @{started()}: {action.describe()}")
            lock = locks.setdefault(action.target or action.kind, asyncio.Lock())
            tasks.append(asyncio.create_task(self._locked(lock, action)))
        await asyncio.gather(*tasks)

    async def _locked(self, lock: asyncio.Lock, action: Action) -> None:
        async with lock:
            await self._do(action)
            self.done.append(action.describe())

    async def _do(self, action: Action) -> None:
        if action.kind == "kill":
            self.down.add(action.target)
            try:
                self.stack.kill(action.target)
                await asyncio.sleep(action.down_s)
                self._start(action.target)
            finally:
                self.down.discard(action.target)
        elif action.kind == "fault":
            async with httpx.AsyncClient(timeout=10) as client:
                await client.post(f"{self.stack.sandbox_url}/v1/faults", json=action.fault)
        else:
            server = self.kafka if action.kind == "kafka" else self.postgres
            if server is None:
                self.log(f"  ({action.kind} is not ours to restart: skipped)")
                return
            if action.crash:
                await asyncio.to_thread(server.kill)
                await asyncio.sleep(action.down_s)
                await self.bring_back(action.kind, server, server.start)
            else:
                await self.bring_back(action.kind, server, server.restart)

    async def bring_back(self, kind: str, server: Server, start: Callable[[], None]) -> None:
        """Start (or restart) `server`, and start it again if that fails: after a kill -9 a
        broker recovers its logs before it serves, which on a loaded machine can outlast
        the infrastructure's start timeout (a 10,000-transaction run at load 30: the start
        timed out and killed the broker, the nemesis died with the error, and Kafka stayed
        down for the rest of the run), or a start refused at once (the port of a database
        just killed still held): each next start waits longer (RETRY_WAIT_S). Gives up,
        raising, after START_TRIES."""
        for tries in range(1, START_TRIES + 1):
            try:
                await asyncio.to_thread(start)
                return
            except InfraError as error:
                if tries == START_TRIES:
                    raise
                first_line = str(error).splitlines()[0] if str(error) else repr(error)
                wait_s = self.retry_wait_s * 2 ** (tries - 1)
                again = f"starting it again in {wait_s:g} s"
                self.log(f"  !! {kind} did not come back ({first_line}); {again}")
                await asyncio.sleep(wait_s)
                start = server.start

    def _start(self, name: str) -> None:
        service, _, copy = name.partition("-")
        self.stack.start(service, f"-{copy}" if copy else "")

    async def supervise(self) -> None:
        """Until cancelled: restart any recon process that exited without being killed."""
        while True:
            self.restart_exited()
            await asyncio.sleep(0.5)

    def restart_exited(self) -> None:
        for name, process in list(self.stack.processes.items()):
            if name in self.down or process.poll() is None:
                continue
            tail = self.stack.log_tail(name, 5).replace("\n", " | ")
            self.unexpected_exits.append(f"{name} exited {process.returncode}: {tail[-300:]}")
            self.log(f"  !! {name} exited on its own ({process.returncode}); restarting it")
            self._start(name)
