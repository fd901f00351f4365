"""The deterministic simulator (tests.simulation): the default number of seeded schedules
hold every invariant, a seed replays byte for byte, and each deliberately injected bug is
caught within the default seeds."""

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from simulation.bugs import BUGS, CAUGHT_AT
from simulation.run import DEFAULT_SEEDS, caught, run_many, run_one
from simulation.world import World

ROOT = Path(__file__).resolve().parents[2]
# About 25 s on 2 free cores; the shared CI machine can be many times slower.
SLOW = pytest.mark.timeout(1800)


@SLOW
def test_the_default_seeds_hold_every_invariant() -> None:
    result = run_many(DEFAULT_SEEDS)
    print(f"{result.schedules} schedules in {result.seconds:.1f}s ({result.per_second:.0f}/s)")
    assert result.failure is None, (
        f"{result.failure.problem}\nreplay: {result.failure.replay(None)}" if result.failure else ""
    )
    assert result.schedules >= DEFAULT_SEEDS


@pytest.mark.parametrize("seed", [3, 7, 1234])
def test_a_seed_replays_the_same_events_byte_for_byte(seed: int) -> None:
    first, again = run_one(seed), run_one(seed)
    assert first.trace == again.trace
    assert first.event_bytes() == again.event_bytes()
    assert first.events.end > 0
    # Another process (another PYTHONHASHSEED, so another set order) replays it too.
    replayed = subprocess.run(
        [sys.executable, "-m", "tests.simulation", "--seed", str(seed)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert hashlib.sha256(first.event_bytes()).hexdigest() in replayed


@SLOW
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_an_injected_bug_is_caught_within_the_default_seeds(bug: str) -> None:
    failure = caught(bug, near=CAUGHT_AT.get(bug, 0))
    assert failure is not None, f"{bug} went unnoticed in {DEFAULT_SEEDS} schedules"
    print(f"{bug}: seed {failure.seed} (CAUGHT_AT {CAUGHT_AT.get(bug)}): {failure.problem}")
    # The printed command replays it: the same seed fails the same way in one process.
    replay = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.simulation",
            "--seed",
            str(failure.seed),
            "--bug",
            bug,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert replay.returncode == 1
    assert failure.problem in replay.stdout


@pytest.mark.parametrize("seed", [65, 637])
def test_a_redelivery_found_absent_is_not_sent_once_its_transaction_failed(seed: int) -> None:
    """With a provider that judges a declined key's resend afresh (World.afresh), these
    seeds had a take-over's redelivery of a charge look up, find nothing (a decline leaves
    no effect), and send it again after the charge's own decline, reaching the owner
    meanwhile, had failed the transaction: a charge left in place. It now asks whether the
    transaction still waits on the call before it sends (call_plan._still_awaited)."""
    World(seed, afresh=True).run()


def test_production_code_never_imports_the_simulator() -> None:
    production = ["services", "events", "projections", "reconcilers"]
    offenders = [
        str(path.relative_to(ROOT))
        for folder in production
        for path in (ROOT / folder).rglob("*.py")
        if "simulation" in path.read_text(encoding="utf-8")
    ]
    assert offenders == []


def test_every_injected_bug_names_the_seed_its_test_tries_first() -> None:
    assert sorted(CAUGHT_AT) == sorted(BUGS)
