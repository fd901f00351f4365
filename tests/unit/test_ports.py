"""services.devtools.ports: each process draws from its own slice, below the ephemeral range,
starting at a random place in it, and goes round every port of the slice."""

import random

import pytest

from services.devtools import ports


def test_a_process_goes_round_every_port_of_its_slice_from_a_random_start() -> None:
    firsts = set()
    for seed in range(8):
        random.seed(seed)
        cycle = ports._candidates()
        drawn = [next(cycle) for _ in range(ports.SLICE)]
        start = ports.LOW + ports._slice() * ports.SLICE
        assert sorted(drawn) == list(range(start, start + ports.SLICE))
        assert next(cycle) == drawn[0]  # round again, in the same order
        firsts.add(drawn[0])
    # Two runs sharing a slice do not both begin at its first port.
    assert len(firsts) > 1


def test_the_workers_of_a_run_take_slices_of_their_own_placed_by_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def slices(run: str, workers: int) -> list[int]:
        monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", run)
        found = []
        for n in range(workers):
            monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{n}")
            found.append(ports._slice())
        return found

    assert len(set(slices("one run", ports.SLICES))) == ports.SLICES
    # Two suites side by side: their gw1s no longer always share a slice (they did when the
    # slice was the worker's number alone).
    assert len({slices(f"run {i}", 2)[1] for i in range(10)}) > 1
