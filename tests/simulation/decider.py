"""The decider process: the real `handled` and `keep` (finished markers), in simulated Kafka
transactions, and the provider calls it makes once they commit (.dispatch_host).

As in services.decider.runtime, a partition's decisions are staged (`Batch`, runtime's
`Staged`): the events, the new states (changelog), the offsets of the inputs decided and the
answers of its own calls decided inline. Group commit (services.decider.group_commit): a
batch holding a decision that matters starts its transaction at once, one of evidence alone
once it has waited its interval, each no sooner than the spacing after the last one ended:
the real `nobody_waits`, `interval`, `spacing_bound` and `next_start` say which and when,
on simulated time. Pipelining: the batch goes on the wire (`send`) and the partition's later
inputs are decided on its states and staged for the next one, which may start only once it
has ended. On the wire it commits (`commit`: its records and offsets visible at once, nothing
of the batch staged after it) and then the process acts on the commit (`end`: its states
become the partition's memory and the calls of its dispatches start), or it fails before
either (`abort`, also a commit whose answer was lost). A failure or a crash at any point
forgets the staged batch and the one on the wire with the rest of the memory; the partition
is taken again: its states restored from the changelog through the real `parse_stored`
(markers for finished transactions), its inputs read again from the committed offsets, and
what the states still wait on called again by the real take-over rule. A revocation waits for
the transaction on the wire to end and drops what is staged. One SimDecider is one partition
of the process; the world owns one or two (tests.simulation.world).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from events.envelope import Envelope
from events.inputs import DeciderInput, OperationObserved
from services.decider.group_commit import interval, next_start, nobody_waits, spacing_bound
from services.decider.restore import StateKey, Stored, parse_stored
from services.dispatcher.dispatch_order import DispatchOrder, dispatch_orders
from transactions.finished import FinishedTransaction, keep, revive
from transactions.state import TransactionState
from transactions.transaction import handled, initial_state, is_terminal

from .clock import Clock
from .dispatch_host import SimDispatchHost
from .kafka import Consumer, Log

# RECON_DECIDER_GROUP_COMMIT_MS's default, in seconds (Settings.decider_group_commit_s).
GROUP_COMMIT_S = 0.1
# The last fetch as group_commit reads it: one input of one partition (no backlog).
FETCHED = 1


@dataclass
class Batch:
    """One decider Kafka transaction in the making (services.decider.staged.Staged)."""

    since: int  # when its first decision was staged (simulated ms)
    changes: dict[StateKey, Stored] = field(default_factory=dict)
    decisions: list[tuple[DeciderInput, list[Envelope]]] = field(default_factory=list)
    # The dispatches it holds, whose calls start once it has committed.
    orders: list[DispatchOrder] = field(default_factory=list)
    # The next input to read, per input topic (True: commands): committed with its records.
    offsets: dict[bool, int] = field(default_factory=dict)
    inputs: int = 0
    urgent: bool = False
    live: bool = False  # a decision changed a transaction not finished before it (Staged.live)
    # On the wire: when it was sent, and whether it has committed.
    sent: int = 0
    committed: bool = False


@dataclass
class SimDecider:
    """One partition of the decider process: its consumers, its memory, its changelog."""

    partition: int
    commands: Consumer[DeciderInput]
    observations: Consumer[DeciderInput]
    events: Log[Envelope]
    on_event: Callable[[Envelope], None]
    host: SimDispatchHost
    # The answers of this process's calls, waiting for the partition's next transaction
    # (the host queues them; Decider.answers).
    answers: list[OperationObserved]
    clock: Clock
    # Each committed input with the events it caused, before those events' on_event.
    on_decided: Callable[[DeciderInput, list[Envelope]], None] = lambda _m, _e: None
    changelog: Log[Stored] = field(default_factory=Log)
    states: dict[StateKey, Stored] = field(default_factory=dict)
    staged: Batch | None = None
    # The transactions on the wire, oldest first: at most one (`ready`).
    wire: list[Batch] = field(default_factory=list)
    # When the partition's last transaction ended and how long it took (group_commit).
    ended_at: int = 0
    took_ms: int = 0
    dead_letters: int = 0

    def pending(self) -> bool:
        return self.commands.pending() or self.observations.pending() or bool(self.answers)

    def consume(self, from_commands: bool) -> None:
        """Decide the next input of one topic onto the staged batch."""
        source = self.commands if from_commands else self.observations
        _, message = source.take()
        batch = self._staged()
        batch.inputs += 1
        self._decide(batch, message)
        batch.offsets[from_commands] = source.position

    def decide_answer(self) -> None:
        """Decide the oldest answer of this process's calls onto the staged batch, which
        writes it to recon.observations as evidence (read back, it is skipped, so it is not
        modelled as a record): a failed transaction loses it."""
        batch = self._staged()
        batch.inputs += 1
        self._decide(batch, self.answers.pop(0))

    def _staged(self) -> Batch:
        if self.staged is None:
            self.staged = Batch(self.clock.now)
        return self.staged

    def stored(self, key: StateKey) -> Stored | None:
        """A transaction's latest decided state: staged, on the wire, or committed
        (OwnedPartition.stored)."""
        for batch in (self.staged, *reversed(self.wire)):
            if batch is not None and key in batch.changes:
                return batch.changes[key]
        return self.states.get(key)

    def _decide(self, batch: Batch, message: DeciderInput) -> None:
        key = (message.tenant, message.tx_id)
        stored = self.stored(key)
        if isinstance(stored, FinishedTransaction):
            state = revive(stored)
        else:
            state = stored or initial_state(*key)
        if isinstance(message, OperationObserved) and state.status is None:
            self.dead_letters += 1
            batch.urgent = True  # a dead letter is never held back (Decider._dead_letter)
            return
        finished = is_terminal(state)
        state, envelopes, decided = handled(state, message)
        if not envelopes:
            return
        batch.changes[key] = keep(state)
        batch.decisions.append((message, envelopes))
        batch.orders += dispatch_orders(envelopes, decided, self.partition)
        batch.urgent = batch.urgent or not nobody_waits(decided, state)
        batch.live = batch.live or not finished

    # --- the staged batch's transaction ------------------------------------------------

    def start_at(self) -> int:
        """When the staged batch's transaction may start (Decider._start_at), in simulated
        ms. Always `alone` (the shortest spacing): whether another partition is busy is not
        modelled, only when a transaction may start, which the schedule varies anyway."""
        batch = self.staged
        assert batch is not None
        since = batch.since / 1000
        coming = any(c.owned and c.order.partition == self.partition for c in self.host.calls)
        wait = (
            0.0
            if batch.urgent
            else interval(
                GROUP_COMMIT_S, FETCHED, 1, answer_coming=coming, only_finished=not batch.live
            )
        )
        took = self.took_ms / 1000
        bound = spacing_bound(GROUP_COMMIT_S, FETCHED, 1, took, alone=True)
        return math.ceil(next_start(since + wait, self.ended_at / 1000, took, bound) * 1000)

    def ready(self) -> bool:
        """Whether the staged batch may go on the wire: due, and the partition's previous
        transaction ended (one at a time, in order)."""
        return self.staged is not None and not self.wire and self.clock.now >= self.start_at()

    def send(self) -> None:
        """The staged batch goes on the wire (Decider._detach, then _send's records written
        in the open transaction); what is decided from now on is staged for the next."""
        batch, self.staged = self.staged, None
        assert batch is not None
        batch.sent = self.clock.now
        self.wire.append(batch)

    def committable(self) -> list[int]:
        return [i for i, batch in enumerate(self.wire) if not batch.committed]

    def commit(self, index: int = 0) -> None:
        """The transaction on the wire commits: its events, states and input offsets become
        visible together (read_committed)."""
        batch = self.wire[index]
        batch.committed = True
        for message, envelopes in batch.decisions:
            self.on_decided(message, envelopes)
            for envelope in envelopes:
                self.events.append(envelope)
                self.on_event(envelope)
        for stored in batch.changes.values():
            self.changelog.append(stored)
        for from_commands, offset in batch.offsets.items():
            (self.commands if from_commands else self.observations).commit(offset)

    def end(self, *, call: bool = True) -> None:
        """The process acts on the commit (the rest of Decider._send): the states become
        the partition's memory, and the calls of its dispatches start (`call`)."""
        batch = next(b for b in self.wire if b.committed)
        self.wire.remove(batch)
        self.states.update(batch.changes)
        self.ended_at = self.clock.now
        self.took_ms = self.clock.now - batch.sent
        if call:
            self.host.submit(batch.orders)

    def abort(self) -> None:
        """The transaction on the wire fails (or its commit's answer is lost): the process
        takes the partition again, its calls running on."""
        self._retake()

    def crash(self) -> None:
        """The process died (its calls with it: SimDispatchHost.crash, first) and its queued
        answers; it restarts and takes the partition again."""
        self.answers.clear()
        self._retake()

    def lose_partition(self, pause_ms: int) -> None:
        """Another member takes the partition while this one keeps running: its calls go
        on as zombies, and its queued answers go to recon.observations
        (Decider._take_answers: a partition no longer owned). A transaction it committed
        and has not acted on yet still starts its calls (DispatchHost.submit asks no owner):
        zombies as well; one not committed is fenced."""
        for batch in self.wire:
            if batch.committed:
                self.host.submit(batch.orders)
        self.host.lose_partition(self.partition, pause_ms)
        for answer in self.answers:
            self.host.forward(self.partition, answer)
        self.answers.clear()
        self._retake()

    def revoke(self, commits: bool) -> None:
        """A revocation (on_partitions_revoked, also a clean stop's): the transaction on the
        wire ends first, committed (and acted on) or failed; then what is staged is
        committed too, its calls left to the next owner's take-over (Decider.hand_over),
        unless the transaction on the wire failed or, with none on the wire, that commit
        fails (`commits` either way); then the partition is dropped, its calls run on and
        answer to recon.observations, and its next owner takes it."""
        if commits:
            for index in self.committable():
                self.commit(index)
        self.wire = [b for b in self.wire if b.committed]
        while self.wire:
            self.end()
        if commits and self.staged is not None:
            self.send()
            self.commit()
            self.end(call=False)
        self.host.let_go(self.partition)
        self.lose_partition(0)

    def _retake(self) -> None:
        """Restore from the changelog, read the inputs again from the committed offsets,
        and call again what the restored states wait on (Decider.retake)."""
        self.staged = None
        self.wire = []
        self.commands.crash()
        self.observations.crash()
        latest = {(s.tenant, s.tx_id): s for s in self.changelog.records}  # compaction
        self.states = {}
        for key, stored in latest.items():
            # Through the bytes, as the real restore reads them.
            self.states[key] = parse_stored(stored.model_dump_json().encode())[0]
        live = [s for s in self.states.values() if isinstance(s, TransactionState)]
        self.host.take_over(live, self.partition)

    def state_of(self, key: StateKey) -> TransactionState | None:
        stored = self.states.get(key)
        if stored is None:
            return None
        return revive(stored) if isinstance(stored, FinishedTransaction) else stored
