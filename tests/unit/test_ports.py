"""services.devtools.ports: each process draws from its own slice, below the ephemeral range,
starting at a random place in it, and goes round every port of the slice."""

import random

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
