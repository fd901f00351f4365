"""When the decider signs the chain heads it wrote (events.checkpoint), per partition.

A head is signed at the latest `interval_s` after it was written, and at once when its
transaction ended: the checkpoint then travels in the same Kafka transaction as the last
event, so a finished transaction's final head is never unsigned on the log. Heads between
two checkpoints are kept in memory only: a decider that crashes before signing them loses
them, and the transaction's next head (or its end) is signed instead, which covers the
lost ones through the chain.

Each partition's checkpoints are linked (events.checkpoint.CheckpointChain), so that an
auditor checks one signature for a run of them; the link lives in the partition's memory
and a partition taken again starts a new run.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events.checkpoint import CheckpointChain, Head
from services.decider.restore import StateKey


@dataclass
class UnsignedHeads:
    interval_s: float
    clock: Callable[[], float] = time.monotonic
    heads: dict[StateKey, Head] = field(default_factory=dict)
    since: float | None = None  # when the oldest unsigned head was written

    def overdue(self) -> bool:
        return self.since is not None and self.clock() - self.since >= self.interval_s

    def pending(self, new: dict[StateKey, Head]) -> list[Head]:
        """What a checkpoint now would sign: the kept heads, updated by a batch's."""
        return list({**self.heads, **new}.values())

    def signed(self) -> None:
        self.heads.clear()
        self.since = None

    def keep(self, new: dict[StateKey, Head]) -> None:
        if new and self.since is None:
            self.since = self.clock()
        self.heads.update(new)


def checkpoint_records(
    private: Ed25519PrivateKey, heads: list[Head], chain: CheckpointChain
) -> list[bytes]:
    """The records of recon.checkpoints signing these heads (several past MAX_HEADS), each
    naming the partition's record before it."""
    return chain.records(private, datetime.now(UTC).isoformat(), heads)
