"""The projector's stall rule (services.projector.stall_watch): pure, the clock is given."""

from services.projector.stall_watch import StallWatch


def test_a_poll_with_partitions_outside_a_rebalance_is_healthy() -> None:
    watch = StallWatch(limit_s=10, healthy_at=0)
    watch.polled(assigned=True, now=8)
    assert watch.stalled_for(17) is None
    assert watch.stalled_for(18) == 10


def test_polls_without_partitions_or_inside_a_rebalance_do_not_count() -> None:
    watch = StallWatch(limit_s=10, healthy_at=0)
    watch.polled(assigned=False, now=5)
    watch.seeking += 1
    watch.polled(assigned=True, now=9)
    assert watch.stalled_for(12) == 12
    watch.seeking -= 1
    watch.polled(assigned=True, now=13)
    assert watch.stalled_for(14) is None
