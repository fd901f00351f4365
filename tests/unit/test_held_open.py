"""The bound a transaction held open across a round trip gives Postgres (projections.
held_open): its setting's value, and the bounds it refuses."""

import pytest

from projections.held_open import LONGEST_IDLE_BOUND_S, idle_bound_ms


def test_a_bound_in_seconds_is_set_in_milliseconds() -> None:
    assert idle_bound_ms(60.0) == "60000ms"
    assert idle_bound_ms(1.5) == "1500ms"
    assert idle_bound_ms(LONGEST_IDLE_BOUND_S) == "3600000ms"


def test_a_bound_under_a_millisecond_is_one_not_none() -> None:
    # Postgres reads 0 as "no bound": a tiny bound must not round to it.
    assert idle_bound_ms(0.0001) == "1ms"


@pytest.mark.parametrize("wrong", [0.0, -1.0, LONGEST_IDLE_BOUND_S + 1, float("nan")])
def test_no_bound_and_a_bound_past_an_hour_are_refused(wrong: float) -> None:
    with pytest.raises(ValueError, match="idle bound is more than 0 and at most 3600 s"):
        idle_bound_ms(wrong)
