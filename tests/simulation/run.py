"""Running many seeds: one World per seed, spread over the machine's cores, stopping at
the first seed that breaks an invariant."""

import os
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass

from .bugs import inject
from .invariants import Violation
from .world import World

# What the unit suite (make test) runs. 8,000 since the decider's pipelining is modelled (stop
# 45): a schedule takes 148 steps against 128 and about 1.2 times the CPU, and 8,000 of them
# cost what 10,000 did (docs/testing.md).
DEFAULT_SEEDS = 8_000
# Seeds per task. Small, because a run stops at its first failing seed but the other
# worker finishes the chunk it has begun: with 250, each injected bug's test ran up to 250
# schedules past its seed (stop 47: the four kill switch bugs' tests took 60 s, 28 s with 50).
CHUNK = 50


@dataclass(frozen=True)
class Failure:
    seed: int
    problem: str

    def replay(self, bug: str | None) -> str:
        extra = f" --bug {bug}" if bug else ""
        return f"uv run python -m tests.simulation --seed {self.seed}{extra}"


@dataclass(frozen=True)
class Result:
    schedules: int
    seconds: float
    failure: Failure | None

    @property
    def per_second(self) -> float:
        return self.schedules / self.seconds if self.seconds else 0.0


def run_one(seed: int, bug: str | None = None) -> World:
    """Run one schedule; raises Violation (with the seed) when an invariant breaks."""
    with inject(bug) if bug else nullcontext():
        world = World(seed)
        world.run()
    return world


def _chunk(first: int, count: int, bug: str | None) -> tuple[int, Failure | None]:
    with inject(bug) if bug else nullcontext():
        for seed in range(first, first + count):
            try:
                World(seed).run()
            except Violation as violation:
                return seed - first + 1, Failure(seed, str(violation))
    return count, None


def _chunks(first: int, seeds: int) -> Iterator[tuple[int, int]]:
    for start in range(first, first + seeds, CHUNK):
        yield start, min(CHUNK, first + seeds - start)


def caught(bug: str, near: int, seeds: int = DEFAULT_SEEDS) -> Failure | None:
    """A seed below `seeds` that catches `bug`, tried from `near` on (where it was caught
    last, bugs.CAUGHT_AT) and then below it: the same question as run_many(seeds, bug=bug),
    answered by one schedule while the seed holds, where the whole scan up to it (hundreds
    of schedules for some bugs) cost each test most of its time. `near` itself runs in this
    process (no pool to start); a model change that moved the seed costs a scan, never a
    check."""
    try:
        run_one(near, bug)
    except Violation as violation:
        return Failure(near, str(violation))
    for first, count in ((near + 1, seeds - near - 1), (0, near)):
        failure = run_many(count, first, bug).failure if count > 0 else None
        if failure is not None:
            return failure
    return None


def run_many(seeds: int, first: int = 0, bug: str | None = None, workers: int = 0) -> Result:
    """Seeds first .. first+seeds-1; the lowest failing seed found is reported."""
    workers = workers or min(2, os.cpu_count() or 1)
    started = time.perf_counter()
    done = 0
    failure: Failure | None = None
    with ProcessPoolExecutor(workers) as pool:
        futures = [pool.submit(_chunk, start, count, bug) for start, count in _chunks(first, seeds)]
        for future in futures:  # in seed order, so the reported failure is the lowest
            ran, found = future.result()
            done += ran
            if found is not None:
                failure = found
                for rest in futures:
                    rest.cancel()
                break
    return Result(done, time.perf_counter() - started, failure)
