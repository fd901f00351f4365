"""Simulated Kafka: append-only logs (one partition each, so per-partition order is the
log's order) and consumers whose committed offset is all a crash keeps.

Records are kept as objects, not bytes: the simulator runs thousands of schedules a
minute, and re-parsing every record would cost more than the decisions themselves. The
decider's transactions are modelled in tests.simulation.decider (staged, on the wire, then
committed or failed as one).
"""

from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class Log(Generic[T]):
    records: list[T] = field(default_factory=list)

    def append(self, record: T) -> int:
        self.records.append(record)
        return len(self.records) - 1

    @property
    def end(self) -> int:
        return len(self.records)


@dataclass
class Consumer(Generic[T]):
    """A consumer's read position and its group's committed offset."""

    log: Log[T]
    position: int = 0
    committed: int = 0

    def pending(self) -> bool:
        return self.position < len(self.log.records)

    def take(self) -> tuple[int, T]:
        offset = self.position
        self.position += 1
        return offset, self.log.records[offset]

    def commit(self, offset: int | None = None) -> None:
        self.committed = self.position if offset is None else offset

    def crash(self) -> None:
        """A restart: everything read since the last commit is delivered again."""
        self.position = self.committed
