"""The decider process: the real `handled` and `keep` (finished markers), in simulated Kafka
transactions, and the provider calls it makes once they commit (.dispatch_host).

Like services.decider.runtime, one transaction carries a batch's events, the new states
(changelog), the consumed offsets and the answers of its own calls decided inline: commit
makes all of them visible and starts the calls of the dispatches it holds; an abort or a
crash makes none of them visible, and the inputs are read again. Then the partition is
taken again: its states are restored from the changelog through the real `parse_stored`
(markers for finished transactions), and what they still wait on is called again by the
real take-over rule.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from events.envelope import Envelope
from events.inputs import DeciderInput, OperationObserved
from services.decider.restore import StateKey, Stored, parse_stored
from services.dispatcher.dispatch_order import DispatchOrder, dispatch_orders
from transactions.finished import FinishedTransaction, keep, revive
from transactions.state import TransactionState
from transactions.transaction import handled, initial_state

from .dispatch_host import PARTITION, SimDispatchHost
from .kafka import Consumer, Log


@dataclass
class SimDecider:
    commands: Consumer[DeciderInput]
    observations: Consumer[DeciderInput]
    events: Log[Envelope]
    on_event: Callable[[Envelope], None]
    host: SimDispatchHost
    # The answers of this process's calls, waiting for the partition's next transaction
    # (the host queues them; Decider.answers).
    answers: list[OperationObserved]
    # Each committed input with the events it caused, before those events' on_event.
    on_decided: Callable[[DeciderInput, list[Envelope]], None] = lambda _m, _e: None
    changelog: Log[Stored] = field(default_factory=Log)
    states: dict[StateKey, Stored] = field(default_factory=dict)
    staged_states: dict[StateKey, Stored] = field(default_factory=dict)
    staged_decisions: list[tuple[DeciderInput, list[Envelope]]] = field(default_factory=list)
    # The dispatches the staged decisions made, whose calls start once they commit.
    staged_orders: list[DispatchOrder] = field(default_factory=list)
    staged_inputs: int = 0
    dead_letters: int = 0

    def pending(self) -> bool:
        return self.commands.pending() or self.observations.pending() or bool(self.answers)

    def consume(self, from_commands: bool) -> None:
        """Decide the next input of one topic, staged in the open transaction."""
        source = self.commands if from_commands else self.observations
        _, message = source.take()
        self.staged_inputs += 1
        self._decide(message)

    def decide_answer(self) -> None:
        """Decide the oldest answer of this process's calls onto the open transaction,
        which writes it to recon.observations as evidence (read back, it is skipped, so it
        is not modelled as a record): an abort loses it."""
        self.staged_inputs += 1
        self._decide(self.answers.pop(0))

    def _decide(self, message: DeciderInput) -> None:
        key = (message.tenant, message.tx_id)
        stored = self.staged_states.get(key) or self.states.get(key)
        if isinstance(stored, FinishedTransaction):
            state = revive(stored)
        else:
            state = stored or initial_state(*key)
        if isinstance(message, OperationObserved) and state.status is None:
            self.dead_letters += 1
            return
        state, envelopes, decided = handled(state, message)
        if not envelopes:
            return
        self.staged_states[key] = keep(state)
        self.staged_decisions.append((message, envelopes))
        self.staged_orders += dispatch_orders(envelopes, decided, PARTITION)

    def commit(self) -> None:
        for message, envelopes in self.staged_decisions:
            self.on_decided(message, envelopes)
            for envelope in envelopes:
                self.events.append(envelope)
                self.on_event(envelope)
        for key, stored in self.staged_states.items():
            self.changelog.append(stored)
            self.states[key] = stored
        self.commands.commit()
        self.observations.commit()
        # Committed: the calls start now (Decider._send, then DispatchHost.submit).
        self.host.submit(self.staged_orders)
        self._clear()

    def abort(self) -> None:
        """A failed transaction: nothing staged happened (its inline answers are lost);
        the process takes the partition again, its calls running on."""
        self._retake()

    def crash(self) -> None:
        """The process dies with its calls and its queued answers; it restarts and takes
        the partition again."""
        self.host.crash()
        self.answers.clear()
        self._retake()

    def lose_partition(self, pause_ms: int) -> None:
        """Another member takes the partition while this one keeps running: its calls go
        on as zombies, and its queued answers go to recon.observations
        (Decider._take_answers: a partition no longer owned)."""
        self.host.lose_partition(pause_ms)
        for answer in self.answers:
            self.host.forward(answer)
        self.answers.clear()
        self._retake()

    def _retake(self) -> None:
        """Restore from the changelog, read the inputs again from the committed offsets,
        and call again what the restored states wait on (Decider.retake)."""
        self._clear()
        self.commands.crash()
        self.observations.crash()
        latest = {(s.tenant, s.tx_id): s for s in self.changelog.records}  # compaction
        self.states = {}
        for key, stored in latest.items():
            # Through the bytes, as the real restore reads them.
            self.states[key] = parse_stored(stored.model_dump_json().encode())[0]
        live = [s for s in self.states.values() if isinstance(s, TransactionState)]
        self.host.take_over(live)

    def state_of(self, key: StateKey) -> TransactionState | None:
        stored = self.states.get(key)
        if stored is None:
            return None
        return revive(stored) if isinstance(stored, FinishedTransaction) else stored

    def _clear(self) -> None:
        self.staged_states = {}
        self.staged_decisions = []
        self.staged_orders = []
        self.staged_inputs = 0
