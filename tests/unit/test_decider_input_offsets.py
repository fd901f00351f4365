"""Where a decider starts reading an input partition it takes: the changelog's offset
record first, the consumer group's offset only where the changelog has none or where an
earlier release's transaction moved it further; never the decider's own lag marker
(services.decider.input_offsets)."""

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndMetadata
from hypothesis import given
from hypothesis import strategies as st

from events.keys import partition_key
from services.decider.input_offsets import (
    LAG_MARKER_METADATA,
    MisplacedOffsets,
    is_offset_key,
    offset_record,
    parse_offset_record,
    start_offset,
)

TP = TopicPartition("t1.recon.observations", 3)
offsets = st.integers(min_value=0, max_value=2**62)


def marker(offset: int) -> OffsetAndMetadata:
    return OffsetAndMetadata(offset, LAG_MARKER_METADATA)


def transactional(offset: int) -> OffsetAndMetadata:
    """What the decider's earlier release committed with send_offsets_to_transaction."""
    return OffsetAndMetadata(offset, "")


@given(changelog=offsets, group=offsets)
def test_the_lag_marker_is_never_used_in_preference_to_the_changelog(
    changelog: int, group: int
) -> None:
    # Behind (a crash before the marker was sent) or, were it ever, ahead: the changelog.
    assert start_offset(changelog, marker(group)) == changelog


def test_a_changelog_without_offsets_falls_back_to_the_groups_transactional_offset() -> None:
    """A log written before this release: the group's offset is the committed position."""
    assert start_offset(None, transactional(41)) == 41
    assert start_offset(None, None) is None  # never read: from the beginning


def test_an_earlier_releases_transaction_ahead_of_the_changelog_is_honoured() -> None:
    """A rolling upgrade: an earlier release took the partition after this one and committed
    its offsets (and states) in its transactions; going back would decide them again."""
    assert start_offset(100, transactional(150)) == 150
    assert start_offset(100, transactional(90)) == 100


def test_a_lag_marker_without_a_changelog_record_stops_the_take() -> None:
    with pytest.raises(MisplacedOffsets, match="lag marker"):
        start_offset(None, marker(7))


@given(offset=offsets)
def test_an_offset_record_reads_back_and_is_never_a_transactions_key(offset: int) -> None:
    key, value = offset_record(TP, offset)
    assert is_offset_key(key) and not is_offset_key(partition_key("offset:t", "x"))
    assert b"/" not in key  # every transaction's key has one
    assert parse_offset_record(key, value, TP.partition) == (TP, offset)


def test_an_offset_record_on_another_partition_or_under_another_key_is_refused() -> None:
    key, value = offset_record(TP, 5)
    with pytest.raises(ValueError, match="on partition 2"):
        parse_offset_record(key, value, 2)
    with pytest.raises(ValueError, match="under key"):
        parse_offset_record(b"offset:other:3", value, 3)
    with pytest.raises(ValueError):
        parse_offset_record(key, b'{"kind":"offset","topic":"t"}', 3)
