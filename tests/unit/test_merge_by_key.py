"""merge_by_key leaves the rows of a batch as applying them one by one would: the first
row of a key inserts, each later one updates only its table's `update` columns (or does
nothing, for a table without them), in the order the keys first appeared."""

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from projections.table_writes import TABLES, merge_by_key


def one_by_one(name: str, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    table = TABLES[name]
    stored: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        values = dict(zip(table.columns, row, strict=True))
        key = tuple(values[c] for c in table.key)
        if key not in stored:
            stored[key] = values
        else:
            stored[key].update({c: values[c] for c in table.update})
    return [tuple(values[c] for c in table.columns) for values in stored.values()]


@st.composite
def batches(draw: st.DrawFn) -> tuple[str, list[tuple[Any, ...]]]:
    name = draw(st.sampled_from(sorted(TABLES)))
    width = len(TABLES[name].columns)
    # Few distinct values, so keys repeat within a batch.
    value = st.one_of(st.integers(0, 2), st.sampled_from(["a", "b"]), st.none())
    rows = draw(st.lists(st.tuples(*[value] * width), max_size=12))
    return name, rows


@given(batches())
def test_the_merged_rows_are_those_left_by_applying_them_one_by_one(
    batch: tuple[str, list[tuple[Any, ...]]],
) -> None:
    name, rows = batch
    assert merge_by_key(name, rows) == one_by_one(name, rows)
