"""Progress of long work (the audit, the drift scan, the benchmark) on stderr, and a
summary line when it ends.

A live bar (rich) when stderr is a terminal, or when asked for (`--progress-bar`); else,
for logs and pipes, a plain line every `every` units, so that a CI log is not filled with
redraws. stdout keeps only the results, which scripts read.
"""

import argparse
import sys
import time
from collections.abc import AsyncIterator, Sized
from types import TracebackType
from typing import TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as Bar

B = TypeVar("B", bound=Sized)


def add_progress_flag(parser: argparse.ArgumentParser) -> None:
    """`--progress-bar`: draw the live bar even when stderr is not a terminal."""
    parser.add_argument(
        "--progress-bar",
        action="store_true",
        help="draw a live progress bar on stderr even when it is not a terminal",
    )


class Progress:
    """Counts work done out of `total` (an upper bound: the audit counts offsets, which
    include transaction markers). Use as a context manager for the bar and the summary;
    `advance` alone prints the plain lines."""

    def __init__(
        self,
        label: str,
        every: int,
        total: int,
        *,
        unit: str = "records",
        bar: bool | None = None,
    ) -> None:
        self.label, self.every, self.total, self.unit = label, max(every, 1), total, unit
        self.count = 0
        self._next = self.every
        self._started = time.monotonic()
        self._console = Console(stderr=True, force_terminal=True if bar else None)
        self._bar: Bar | None = None
        self._live = self._console.is_terminal if bar is None else bar
        self._task: TaskID | None = None

    def __enter__(self) -> "Progress":
        self._started = time.monotonic()
        if self._live:
            self._bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TaskProgressColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self._console,
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=self.total or None)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
        elapsed = time.monotonic() - self._started
        rate = self.count / elapsed if elapsed > 0 else 0.0
        outcome = "stopped after" if kind is not None else "done:"
        print(
            f"{self.label}: {outcome} {self.count} {self.unit} in {elapsed:.1f} s ({rate:.3g}/s)",
            file=sys.stderr,
            flush=True,
        )

    async def track(self, batches: AsyncIterator[B]) -> AsyncIterator[B]:
        """`batches`, each counted (by its length) as it is handed on, inside this
        progress: the bar while they last, the summary once they end or fail."""
        with self:
            async for batch in batches:
                self.advance(len(batch))
                yield batch

    def advance(self, n: int = 1) -> None:
        self.count += n
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self.count)
            return
        if self.count >= self._next:
            print(
                f"{self.label}: {self.count} of at most {self.total} {self.unit} read"
                if self.unit == "records"
                else f"{self.label}: {self.count} of {self.total} {self.unit}",
                file=sys.stderr,
                flush=True,
            )
            self._next = (self.count // self.every + 1) * self.every
