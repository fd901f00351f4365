"""projections.view_cache: kept views are handed out only while the locked offset row holds
what this projector stored; the partition is forgotten otherwise, and bounded."""

from support.txbuilders import log_of, submit

from projections.view import TxView, apply
from projections.view_cache import ViewCache


def view(tx_id: str) -> TxView:
    [accepted] = log_of(submit(["charge"], tx_id=tx_id), tx_id=tx_id)[:1]
    return apply(None, accepted)


def test_given_views_kept_at_an_offset_when_the_row_still_holds_it_then_they_are_used() -> None:
    cache = ViewCache()
    cache.committed({0: 5}, {0: [view("tx-1")]})

    assert set(cache.views_at({0: 5}, [(0, ("demo", "tx-1"))])) == {("demo", "tx-1")}


def test_given_another_writer_moved_the_offset_then_the_partition_is_forgotten() -> None:
    cache = ViewCache()
    cache.committed({0: 5, 1: 3}, {0: [view("tx-1")], 1: [view("tx-2")]})

    both = [(0, ("demo", "tx-1")), (1, ("demo", "tx-2"))]
    assert set(cache.views_at({0: 9, 1: 3}, both)) == {("demo", "tx-2")}
    # Forgotten, not only passed over: even the offset it kept no longer finds them.
    assert cache.views_at({0: 5}, both) == {}


def test_given_more_views_than_the_bound_then_the_least_recently_written_go() -> None:
    cache = ViewCache(per_partition=2)
    cache.committed({0: 1}, {0: [view("tx-1")]})
    cache.committed({0: 2}, {0: [view("tx-2")]})
    cache.committed({0: 3}, {0: [view("tx-1")]})  # written again: most recent
    cache.committed({0: 4}, {0: [view("tx-3")]})

    every = [(0, ("demo", tx_id)) for tx_id in ("tx-1", "tx-2", "tx-3")]
    assert set(cache.views_at({0: 4}, every)) == {("demo", "tx-1"), ("demo", "tx-3")}


def test_only_the_wanted_views_are_handed_out_and_each_from_its_own_partition() -> None:
    cache = ViewCache()
    cache.committed({0: 5, 1: 3}, {0: [view("tx-1"), view("tx-2")], 1: [view("tx-3")]})

    assert set(cache.views_at({0: 5, 1: 3}, [(0, ("demo", "tx-2"))])) == {("demo", "tx-2")}
    # Kept under partition 0, not 1: a record of another partition reads it again.
    assert cache.views_at({0: 5, 1: 3}, [(1, ("demo", "tx-1"))]) == {}


def test_forget_drops_the_named_partitions_or_all() -> None:
    cache = ViewCache()
    cache.committed({0: 1, 1: 1}, {0: [view("tx-1")], 1: [view("tx-2")]})
    cache.forget({1})
    assert len(cache) == 1
    cache.forget()
    assert len(cache) == 0


def test_offsets_are_known_only_when_every_partition_of_the_batch_is_kept() -> None:
    cache = ViewCache()
    cache.committed({0: 5, 1: 3}, {0: [view("tx-1")]})

    assert cache.offsets([0, 1]) == {0: 5, 1: 3}
    assert cache.offsets([0, 2]) is None
