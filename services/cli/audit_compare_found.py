"""The differences `audit rebuild --compare` finds, slice by slice, kept until it ends so
that it prints them in the order a compare of the whole printed them: table by table
(transactions, operations, reviews, events, drift), and within a table by repr(key),
every column of a row in name order. An auditor diffs one run's output against another's,
so the order is part of the output.

What it keeps grows with the differences, never with the databases: a line per
difference, and a review seen on one side only (below). Two databases that agree leave
it empty.

Pure: no I/O.
"""

from collections.abc import Iterable
from typing import Any

Row = dict[str, Any]
Key = tuple[Any, ...]

KEYS: dict[str, tuple[str, ...]] = {
    "transactions": ("tenant", "tx_id"),
    "operations": ("tenant", "tx_id", "action"),
    "reviews": ("id",),
    "events": ("tenant", "tx_id", "seq"),
    "drift": ("drift_id",),
}

# A table whose key does not name the transaction its rows are read by: a review's id
# could sit under one transaction on one side and another on the other (a corrupted row),
# so its two rows can come in different slices. Until the compare ends, a review seen on
# one side only is kept to be paired; a compare of the whole paired them, and named the
# columns that differ rather than two missing rows.
_PAIRED_ACROSS_SLICES = frozenset({"reviews"})


def _key(table: str, row: Row) -> Key:
    return tuple(row[c] for c in KEYS[table])


def _label(table: str, key: Key) -> str:
    return f"{table} {'/'.join(str(k) for k in key)}"


def _row_differences(table: str, key: Key, live: Row | None, rebuilt: Row | None) -> list[str]:
    if live is None:
        return [f"{_label(table, key)}: in the rebuild, missing from the live database"]
    if rebuilt is None:
        return [f"{_label(table, key)}: in the live database, missing from the rebuild"]
    return [
        f"{_label(table, key)}: {column}: live {live.get(column)!r}, "
        f"rebuilt {rebuilt.get(column)!r}"
        for column in sorted(live.keys() | rebuilt.keys())
        if live.get(column) != rebuilt.get(column)
    ]


class Found:
    def __init__(self) -> None:
        # Per table: (repr(key), its lines); a key is in one slice only, so repr is unique.
        self._lines: dict[str, list[tuple[str, list[str]]]] = {t: [] for t in KEYS}
        self._loose: dict[tuple[str, Key], tuple[Row | None, Row | None]] = {}

    def add(self, table: str, live: Iterable[Row], rebuilt: Iterable[Row]) -> None:
        """One slice's rows of `table` on both sides."""
        live_by = {_key(table, r): r for r in live}
        rebuilt_by = {_key(table, r): r for r in rebuilt}
        for key in live_by.keys() | rebuilt_by.keys():
            a, b = live_by.get(key), rebuilt_by.get(key)
            if table in _PAIRED_ACROSS_SLICES and (a is None or b is None):
                seen_a, seen_b = self._loose.pop((table, key), (None, None))
                a = a if a is not None else seen_a
                b = b if b is not None else seen_b
                if a is None or b is None:
                    self._loose[(table, key)] = (a, b)
                    continue
            self._note(table, key, a, b)

    def _note(self, table: str, key: Key, live: Row | None, rebuilt: Row | None) -> None:
        lines = _row_differences(table, key, live, rebuilt)
        if lines:
            self._lines[table].append((repr(key), lines))

    def lines(self) -> list[str]:
        """Every difference, in the order they are printed; call once, at the end."""
        for (table, key), (a, b) in self._loose.items():
            self._note(table, key, a, b)
        self._loose.clear()
        out: list[str] = []
        for table in KEYS:
            for _, lines in sorted(self._lines[table], key=lambda found: found[0]):
                out += lines
        return out
