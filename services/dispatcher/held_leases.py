"""The call leases one dispatching process holds (services.dispatcher.call_lease), and when
they are released: at a revocation, not at each call's end.

Why: a lease is there for another process's claim (a take-over after a rebalance, or a
hold resumed by the partition's new owner: only the owner resumes a hold, store.
claim_released). The holder is the process (its DispatchHost: `holder`, one
id), not each call, so a redelivery in this same process (a retake after a failed
transaction) claims its own lease at once, and a call that ends normally releases nothing:
one UPDATE per provider call was the benchmark's most run statement (3.00 per transaction
at c30, docs/decider.md). The process itself never makes two calls of one attempt at once
(DispatchHost.running and `again`; a resumed hold's row is left out of the take-over), so
its own lease never has to keep one of its calls from another.

Another process needs the lease only once this one lost the call's partition, so the
releases are made then:
- `let_go`, at a revocation (and a clean stop): one statement releases this process's
  leases of the revoked partitions' calls that are not on the wire. The book remembers
  what it took for as long as the lease lasts (at most MAX_REMEMBERED rows: one forgotten
  sooner just lapses), so no index on `holder` is needed.
- `ended`, for a call still on the wire when its partition was revoked (the rare path): it
  releases its own lease when its apply answers, by a statement of its own, which that
  call waits for (bounded like `let_go`'s) before it reports. At most executor.
  MAX_CONCURRENT_CALLS of them per rebalance; the normal path makes none. (Until stop 47
  they were gathered for 50 ms into one statement by a task of their own: more code, a
  claimer waiting 50 ms longer, and a release pending at a stop for `close` to flush, to
  save a few statements per rebalance.)
A call cancelled mid-call (the process stops) is left to lapse: its request may still be at
the provider. A process that dies leaves every lease to lapse, as a crash always did.

The book also keeps the fence this process was given for each partition it took
(services.dispatcher.call_fence), which its claims and begins carry: `fenced` at each take,
the newest kept, never forgotten (a zombie's carry the fence it had, and are refused).

A crash between two steps: between a begin (or claim) and `took`, or after it, the lease is
in Postgres and lapses; between the revocation and `let_go`'s statement, or between a call's
answer and `ended`'s, likewise. A release that fails (Postgres away) is logged, and its
leases lapse: a claimer waits longer, nothing is called twice. Nothing is ever released
that this process did not take: each release names the holder.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from services.dispatcher.call_fence import Fence

log = logging.getLogger(__name__)

Row = tuple[str, str, str, int]  # (tenant, op_key, leg, attempt)
Release = tuple[Row, str]  # a row and the holder whose lease it clears

# The leases remembered for `let_go`: at c30 about 100 transactions a second of three calls,
# each remembered for its lease (12 s at the default provider timeout), is ~3,600.
MAX_REMEMBERED = 20_000
# A release waits this long at most (Postgres away: the leases lapse).
LET_GO_TIMEOUT_S = 2.0


class HeldLeases:
    def __init__(
        self,
        holder: str,
        owns: Callable[[int], bool],
        release: Callable[[list[Release]], Awaitable[None]],
    ) -> None:
        self.holder = holder
        self._owns = owns
        self._release = release
        # row -> (its partition, the loop time its lease ends at), oldest first.
        self._held: dict[Row, tuple[int, float]] = {}
        # Rows whose call may be on the wire: their apply has not answered.
        self._calling: set[Row] = set()
        # Each partition's fence, from this process's latest take of it.
        self._fences: dict[int, Fence] = {}

    def fenced(self, partition: int, fence: Fence) -> None:
        """This process took `partition` (its producer initialised): its claims of the
        partition's calls carry `fence` from now on (a later take's is newer)."""
        known = self._fences.get(partition)
        # Tokens order the takes of one cluster; a take on another cluster is this process's
        # latest (its bootstrap reaches new brokers): the database orders the two.
        if known is None or (known.owner, known.cluster) != (fence.owner, fence.cluster):
            self._fences[partition] = fence
        elif known < fence:
            self._fences[partition] = fence

    def fence(self, partition: int) -> Fence | None:
        """The fence a claim of `partition`'s calls carries; None if this process never
        took it (a host without Kafka partitions: its claims are not fenced)."""
        return self._fences.get(partition)

    def took(self, row: Row, partition: int, began: float, lease_s: float) -> None:
        """A begin wrote the row, or a claim took it, for this holder: its call goes on.
        `began` is the loop time before the statement (the lease ends a little later)."""
        self._forget_lapsed(began)
        self._held.pop(row, None)  # to the end: the newest lease
        self._held[row] = (partition, began + lease_s)
        self._calling.add(row)

    async def ended(self, row: Row) -> None:
        """The call's apply answered, or its plan ended: kept, unless its partition is not
        this process's any more (revoked meanwhile): then released now, one statement
        (never raises). No statement, no wait, while the partition is owned."""
        if row not in self._calling:
            return
        self._calling.discard(row)
        held = self._held.get(row)
        if held is not None and not self._owns(held[0]):
            del self._held[row]
            await self._release_now([row])

    def cancelled(self, row: Row) -> None:
        """The call was cancelled mid-call (a stop): its request may still be at the
        provider, so the lease lapses rather than be released."""
        self._calling.discard(row)
        self._held.pop(row, None)

    async def let_go(self, partitions: Iterable[int] | None = None) -> int:
        """One statement: this holder's live leases of `partitions`' calls (None: every
        partition's) that are not on the wire are released, so the partitions' next owners
        claim them at once. Never raises; answers how many it released."""
        wanted = None if partitions is None else set(partitions)
        now = asyncio.get_running_loop().time()
        rows = [
            row
            for row, (partition, until) in self._held.items()
            if (wanted is None or partition in wanted) and until > now and row not in self._calling
        ]
        for row in rows:
            del self._held[row]
        return await self._release_now(rows)

    async def _release_now(self, rows: list[Row]) -> int:
        """One statement, at most LET_GO_TIMEOUT_S; how many it released (0 if it failed)."""
        if not rows:
            return 0
        try:
            async with asyncio.timeout(LET_GO_TIMEOUT_S):
                await self._release([(row, self.holder) for row in rows])
        except Exception as error:
            log.warning("releasing %d call leases failed (%r); they lapse", len(rows), error)
            return 0
        return len(rows)

    def _forget_lapsed(self, now: float) -> None:
        while self._held:
            row, (_, until) = next(iter(self._held.items()))
            if until > now and len(self._held) < MAX_REMEMBERED:
                return
            del self._held[row]
