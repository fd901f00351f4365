"""Simulated time: milliseconds since a fixed instant, advanced only by the scheduler."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Clock:
    now: int = 0

    def at(self) -> datetime:
        return T0 + timedelta(milliseconds=self.now)
