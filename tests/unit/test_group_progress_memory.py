"""The progress rule's memory (services.intake.group_progress.Progress): when a group's
clock at a position starts, and which partitions are read, given the looks' standings and
what the reads found."""

from aiokafka import TopicPartition

from services.intake.group_positions import Standing
from services.intake.group_progress import READ_AFTER_S, Gap, Progress

TP = TopicPartition("recon.events", 0)


def test_a_moving_position_is_never_read_nor_waiting() -> None:
    progress = Progress()
    for look in range(20):
        progress.seen("saga", {TP: Standing(look, look + 5)}, now=2.0 * look)
        assert progress.to_read(2.0 * look) == {}
    assert progress.waiting("saga", 40.0) == []


def test_records_after_a_quiet_gap_start_the_clock_at_the_look_that_saw_them() -> None:
    # Given a group idle for an hour behind a commit marker, read once and found so
    progress = Progress()
    progress.seen("saga", {TP: Standing(10, 11)}, now=0.0)
    assert progress.to_read(READ_AFTER_S - 1) == {}
    assert progress.to_read(READ_AFTER_S) == {TP: Standing(10, 11)}
    progress.read(TP, 10, Gap.NOTHING)
    progress.seen("saga", {TP: Standing(10, 11)}, now=3600.0)
    assert progress.to_read(3600.0) == {} and progress.waiting("saga", 3600.0) == []
    # When records arrive and the group does not take them
    progress.seen("saga", {TP: Standing(10, 14)}, now=3602.0)
    assert progress.to_read(3602.0 + READ_AFTER_S) == {TP: Standing(10, 14)}
    progress.read(TP, 10, Gap.RECORD)
    # Then it waits from the look that saw them, not from its last move an hour ago
    [waiting] = progress.waiting("saga", 3662.0)
    assert (waiting.behind, waiting.seconds, waiting.open_transaction) == (4, 60.0, False)
    # And a record read stays work however far the end moves; a move ends the wait
    progress.seen("saga", {TP: Standing(10, 20)}, now=3664.0)
    assert progress.to_read(3664.0) == {}
    assert progress.waiting("saga", 3664.0)[0].seconds == 62.0
    progress.seen("saga", {TP: Standing(11, 20)}, now=3666.0)
    assert progress.waiting("saga", 3666.0) == []


def test_an_open_transaction_is_read_again_and_two_groups_on_a_topic_read_once() -> None:
    # Given the projector and the saga behind on recon.events, the saga further
    progress = Progress()
    progress.seen("projector", {TP: Standing(7, 9)}, now=0.0)
    progress.seen("saga", {TP: Standing(5, 9)}, now=0.0)
    # When one read from the lower position finds a transaction open
    assert progress.to_read(READ_AFTER_S) == {TP: Standing(5, 9)}
    progress.read(TP, 5, Gap.OPEN)
    # Then both wait on it, and it is read again at the next look
    assert [w.open_transaction for w in progress.waiting("projector", 10.0)] == [True]
    assert [w.open_transaction for w in progress.waiting("saga", 10.0)] == [True]
    assert progress.to_read(10.0) == {TP: Standing(5, 9)}
    # And once it is aborted (its marker moves the end), nothing is left to read
    progress.seen("projector", {TP: Standing(7, 10)}, now=12.0)
    progress.seen("saga", {TP: Standing(5, 10)}, now=12.0)
    progress.read(TP, 5, Gap.NOTHING)
    assert progress.waiting("projector", 20.0) == progress.waiting("saga", 20.0) == []


def test_records_after_a_quiet_spell_at_the_end_start_the_clock_at_the_look_that_saw_them() -> None:
    # Given the projector caught up on a drift partition (no commit markers: its position
    # is the end, so it is never read) and nothing added for a minute
    drift = TopicPartition("recon.drift", 3)
    progress = Progress()
    progress.seen("projector", {drift: Standing(4, 4)}, now=0.0)
    progress.seen("projector", {drift: Standing(4, 4)}, now=60.0)
    assert progress.to_read(60.0) == {}
    # When a look sees one report added before the projector has taken it, and reads it
    progress.seen("projector", {drift: Standing(4, 5)}, now=62.0)
    assert progress.to_read(62.0 + READ_AFTER_S) == {drift: Standing(4, 5)}
    progress.read(drift, 4, Gap.RECORD)
    # Then it waits from that look, not from the quiet minute before it (the watch warned
    # "recon.drift[3] 1 behind for 60 s" at an intake's thaw, the report 0.2 s old)
    [waiting] = progress.waiting("projector", 62.0 + READ_AFTER_S)
    assert (waiting.behind, waiting.seconds) == (1, READ_AFTER_S)
