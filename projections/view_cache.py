"""The live transaction views a projector keeps in memory for the partitions it writes, so
that a batch folds its events onto them instead of reading them back from Postgres (three
SELECTs and every operation's evidence parsed again, per batch).

Valid only while this projector is the partition's one writer, and checked, not assumed:
the views kept for a partition are used only when its offset row, locked by projections.writer
(at the start of the batch, or by the batch's one write statement, which then writes
nothing unless the row holds it), holds exactly the offset this projector's own last
committed batch stored. Any other writer (a projector
that held the partition during a rebalance, or while this one was cut off) moved the
offset, and the partition's views are forgotten and read again under the lock. The
projector also forgets everything on revocation and on any failed batch: a rolled-back
batch, or a COMMIT whose outcome is unknown, leaves views in memory that Postgres may not
hold.

It also knows one thing without reading: a transaction whose first event in the batch is
seq 1, at an offset past the stored one, has no view yet. The decider writes a
transaction's seq 1 once (its output is exactly-once), on the transaction's partition, and
an offset past the stored one was never projected.

Pure: no I/O.
"""

from collections import OrderedDict
from collections.abc import Iterable, Mapping

from projections.view import TxView

TxKey = tuple[str, str]

# Views kept per partition, least recently used dropped first: far more than the
# transactions in flight on a partition at once, so that a late webhook's evidence after a
# commit still finds its view. A dropped view is only read again when needed.
VIEWS_PER_PARTITION = 1000


class ViewCache:
    def __init__(self, per_partition: int = VIEWS_PER_PARTITION) -> None:
        self.per_partition = per_partition
        # partition -> (the next offset this projector stored, committed; its views)
        self._partitions: dict[int, tuple[int, OrderedDict[TxKey, TxView]]] = {}

    def views_at(
        self, stored: Mapping[int, int], wanted: Iterable[tuple[int, TxKey]]
    ) -> dict[TxKey, TxView]:
        """The kept views of the `wanted` (partition, transaction) pairs, from the partitions
        whose locked offset row still holds what this projector stored last; every other
        partition of `stored` is forgotten. Looked up by key, not copied whole: a partition
        keeps up to `per_partition` views and a batch continues a few of them (copying every
        kept view was a tenth of the projector's CPU at c30)."""
        valid: dict[int, OrderedDict[TxKey, TxView]] = {}
        for partition, offset in stored.items():
            kept = self._partitions.get(partition)
            if kept is None:
                continue
            if kept[0] != offset:
                del self._partitions[partition]  # another writer: read again
                continue
            valid[partition] = kept[1]
        views: dict[TxKey, TxView] = {}
        for partition, key in wanted:
            table = valid.get(partition)
            view = table.get(key) if table is not None else None
            if view is not None:
                views[key] = view
        return views

    def offsets(self, partitions: Iterable[int]) -> dict[int, int] | None:
        """The offsets this projector last stored for `partitions`, if it kept all of them:
        what a batch checks the offset rows against when it writes without locking and
        reading them first (projections.writer)."""
        offsets: dict[int, int] = {}
        for partition in partitions:
            kept = self._partitions.get(partition)
            if kept is None:
                return None
            offsets[partition] = kept[0]
        return offsets

    def committed(self, offsets: Mapping[int, int], views: Mapping[int, Iterable[TxView]]) -> None:
        """A batch committed: each partition's row now holds `offsets[p]`, and `views[p]`
        are its transactions' views as written."""
        for partition, offset in offsets.items():
            kept = self._partitions.get(partition)
            table = kept[1] if kept is not None else OrderedDict()
            for view in views.get(partition, ()):
                key = (view.tenant, view.tx_id)
                table[key] = view
                table.move_to_end(key)
            while len(table) > self.per_partition:
                table.popitem(last=False)
            self._partitions[partition] = (offset, table)

    def forget(self, partitions: Iterable[int] | None = None) -> None:
        """Drop the views of `partitions` (all, by default)."""
        if partitions is None:
            self._partitions.clear()
            return
        for partition in partitions:
            self._partitions.pop(partition, None)

    def __len__(self) -> int:
        return sum(len(table) for _, table in self._partitions.values())
