"""The progress display of long work (issue 14, item 5): plain lines for logs and pipes,
a live bar on a terminal or when asked, and a summary line at the end either way."""

import asyncio
from collections.abc import AsyncIterator

import pytest

from services.cli.progress import Progress


async def batches(*sizes: int, fail: bool = False) -> AsyncIterator[list[int]]:
    for size in sizes:
        yield [0] * size
    if fail:
        raise RuntimeError("the log went away")


async def read_all(progress: Progress, source: AsyncIterator[list[int]]) -> int:
    read = 0
    async for batch in progress.track(source):
        read += len(batch)
    return read


def test_without_a_terminal_a_line_every_n_records_and_a_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    progress = Progress("audit verify", 5, 12)
    assert asyncio.run(read_all(progress, batches(4, 4, 4))) == 12
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == [
        "audit verify: 8 of at most 12 records read",
        "audit verify: 12 of at most 12 records read",
    ]
    assert err[2].startswith("audit verify: done: 12 records in ")
    assert "━" not in "".join(err)


def test_a_bar_when_asked_and_the_summary_after_it(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress("audit rebuild", 5, 12, bar=True)
    assert asyncio.run(read_all(progress, batches(4, 4, 4))) == 12
    err = capsys.readouterr().err
    assert "━" in err  # the bar was drawn
    assert "records read" not in err  # instead of the lines
    assert "audit rebuild: done: 12 records in " in err


def test_a_failure_still_ends_with_what_was_done(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress("audit verify", 100, 12)
    with pytest.raises(RuntimeError):
        asyncio.run(read_all(progress, batches(4, fail=True)))
    assert "audit verify: stopped after 4 records in " in capsys.readouterr().err


def test_other_units_count_out_of_their_total(capsys: pytest.CaptureFixture[str]) -> None:
    with Progress("bench", 2, 4, unit="transactions committed") as progress:
        for _ in range(4):
            progress.advance()
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == [
        "bench: 2 of 4 transactions committed",
        "bench: 4 of 4 transactions committed",
    ]
    assert err[2].startswith("bench: done: 4 transactions committed in ")
