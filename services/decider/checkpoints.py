"""When the decider signs the chain heads it wrote (events.checkpoint), per partition.

A head is signed at the latest `interval_s` after it was written, and at once when its
transaction ended: the checkpoint then travels in the same Kafka transaction as the last
event, so a finished transaction's final head is never unsigned on the log. Heads between
two checkpoints are kept in memory only: a decider that crashes before signing them loses
them, and the transaction's next head (or its end) is signed instead, which covers the
lost ones through the chain.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events.checkpoint import MAX_HEADS, Head, sign_checkpoint
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


def checkpoint_records(private: Ed25519PrivateKey, heads: list[Head]) -> list[bytes]:
    """The records of recon.checkpoints signing these heads (several past MAX_HEADS)."""
    signed_at = datetime.now(UTC).isoformat()
    return [
        orjson.dumps(sign_checkpoint(private, signed_at, heads[i : i + MAX_HEADS]))
        for i in range(0, len(heads), MAX_HEADS)
    ]
