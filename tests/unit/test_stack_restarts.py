"""`make run` restarts a service that exits, with a back-off (issue 18, item 3)."""

from hypothesis import given
from hypothesis import strategies as st

from services.devtools.restarts import Restarts


def test_exits_in_a_row_double_the_delay_up_to_the_cap() -> None:
    # Given a service that exits right after each start
    restarts = Restarts(first_s=1, max_s=8, healthy_s=60)
    delays = []
    now = 0.0
    for _ in range(6):
        restarts.started("intents", now)
        now += 0.5
        # When it exits
        delays.append(restarts.exited("intents", now))
        now += delays[-1]
    # Then each restart waits twice as long, never more than the cap
    assert delays == [1, 2, 4, 8, 8, 8]


def test_a_service_that_ran_long_enough_starts_again_from_the_first_delay() -> None:
    restarts = Restarts(first_s=1, max_s=30, healthy_s=60)
    restarts.started("intents", 0)
    assert restarts.exited("intents", 1) == 1
    restarts.started("intents", 2)
    assert restarts.exited("intents", 3) == 2
    # Given it then ran for longer than healthy_s
    restarts.started("intents", 5)
    # Then its next exit is treated as the first
    assert restarts.exited("intents", 500) == 1


def test_services_back_off_independently() -> None:
    restarts = Restarts(first_s=1, max_s=30, healthy_s=60)
    for name in ("intents", "intents", "intents"):
        restarts.started(name, 0)
        restarts.exited(name, 0)
    restarts.started("saga", 0)
    assert restarts.exited("saga", 0) == 1


@given(st.lists(st.floats(min_value=0, max_value=1000), max_size=30))
def test_the_delay_is_always_between_the_first_and_the_cap(runs: list[float]) -> None:
    restarts = Restarts(first_s=1, max_s=30, healthy_s=60)
    now = 0.0
    for ran in runs:
        restarts.started("x", now)
        now += ran
        assert 1 <= restarts.exited("x", now) <= 30
