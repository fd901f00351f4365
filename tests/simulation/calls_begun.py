"""The durable `calls_begun` table (services.dispatcher.calls_begun), modelled: one row per
(op_key, leg, attempt), kept across decider crashes and lost partitions as Postgres keeps
it, the abort and kill switch rules of its `begin` statement (the switches that cover the
call come from tests.simulation.holds), and each row's lease (who is making the call, until
when: services.dispatcher.call_lease), taken by a begin that writes the row or by a claim,
cleared by a release, lapsing on the clock; and the partitions' owners' fences a claim is
refused by (`call_fences`).
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from events.definition import Leg
from services.dispatcher.call_plan import Begun
from services.dispatcher.calls_begun import Claimed

Row = tuple[str, str, int]  # (op_key, leg, attempt); one tenant in the simulation


@dataclass
class SimCallsBegun:
    # Whether the transaction's abort was recorded (by the intake, before its 202) and
    # op_key is one of its steps' forward keys: the intents row's question in `begin`.
    abort_stops: Callable[[str, str], bool]
    rows: set[Row] = field(default_factory=set)
    legs: set[tuple[str, str]] = field(default_factory=set)  # (op_key, leg) of every row
    leases: dict[Row, tuple[int, int]] = field(default_factory=dict)  # row: (holder, until)
    # `call_fences`: each partition's newest owner's fence (services.dispatcher.call_fence),
    # modelled as its holder, which grows with each take by another process (a new holder
    # then) as the producer's epoch does.
    fences: dict[int, int] = field(default_factory=dict)

    def was_begun(self, op_key: str, leg: Leg, attempt: int) -> bool:
        return (op_key, leg.value, attempt) in self.rows

    def begin(
        self,
        tx_id: str,
        op_key: str,
        leg: Leg,
        attempt: int,
        holder: int,
        until: int,
        switches: tuple[str, ...],
        partition: int,
    ) -> Begun:
        """As the statement does: a caller whose partition was taken after its process took
        it writes nothing (`superseded`); `switches`, the engaged switches that cover the call (the
        statement's own check, in one snapshot with the write), or a step's forward call
        never begun under any attempt once the abort is recorded, write nothing; otherwise
        the row is written unless it exists (`existed`: a call may have been made, by
        anyone)."""
        row = (op_key, leg.value, attempt)
        if self._superseded(partition, holder):
            return Begun((), written=False, existed=row in self.rows, superseded=True)
        aborted = (
            leg is Leg.FORWARD
            and (op_key, leg.value) not in self.legs
            and self.abort_stops(tx_id, op_key)
        )
        if switches or aborted:
            return Begun(switches, written=False, aborted=aborted, existed=row in self.rows)
        if row in self.rows:
            return Begun((), written=False, existed=True)
        self.rows.add(row)
        self.legs.add((op_key, leg.value))
        self.leases[row] = (holder, until)
        return Begun((), written=True)

    def write_fence(self, partition: int, holder: int) -> None:
        """As `write_fence`: kept only if newer."""
        self.fences[partition] = max(self.fences.get(partition, holder), holder)

    def _superseded(self, partition: int, holder: int) -> bool:
        """Whether the partition's owner took it after `holder`'s process (a newer fence)."""
        return self.fences.get(partition, holder) > holder

    def claim(self, row: Row, holder: int, now: int, until: int, partition: int) -> Claimed:
        """As `claim`'s statement: taken unless another holder's lease is live, or the
        partition's owner took it after the claimer (its fence is newer)."""
        if self._superseded(partition, holder):
            return Claimed.SUPERSEDED
        if row not in self.rows:
            return Claimed.NO_ROW
        held = self.leases.get(row)
        if held is not None and held[0] != holder and held[1] > now:
            return Claimed.HELD
        self.leases[row] = (holder, until)
        return Claimed.TAKEN

    def release(self, row: Row, holder: int) -> None:
        held = self.leases.get(row)
        if held is not None and held[0] == holder:
            del self.leases[row]
