"""services.collector: a service collects young garbage far less often, and a reference
cycle dropped afterwards is still collected without anyone calling gc.collect."""

import gc
import weakref
from collections.abc import Iterator

import pytest

from services.collector import YOUNG_THRESHOLD, tune_for_service


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture
def tuned() -> Iterator[None]:
    threshold = gc.get_threshold()
    try:
        tune_for_service()
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.mark.usefixtures("tuned")
def test_start_up_objects_are_frozen_and_young_collections_are_rarer() -> None:
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD


@pytest.mark.usefixtures("tuned")
def test_a_cycle_dropped_later_is_still_collected() -> None:
    assert gc.isenabled()
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    assert gone() is not None  # a cycle: reference counting alone never frees it
    # Live container objects past the threshold trigger a young collection by themselves.
    kept: list[list[int]] = [[] for _ in range(2 * YOUNG_THRESHOLD)]
    assert gone() is None
    del kept
