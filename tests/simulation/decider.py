"""The decider process: the real `handle` and finished markers, in simulated Kafka
transactions.

Like services.decider.runtime, one transaction carries a batch's events, the new states
(changelog) and the consumed offsets: commit makes all of them visible, an abort or a
crash none of them, and the inputs are read again. A restart restores the states from the
changelog through the real `parse_stored` (markers for finished transactions).
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from events.envelope import Envelope
from events.inputs import DeciderInput, OperationObserved
from services.decider.restore import StateKey, Stored, parse_stored
from transactions.finished import FinishedTransaction, finish, is_finished, revive
from transactions.state import TransactionState
from transactions.transaction import handle, initial_state

from .kafka import Consumer, Log


@dataclass
class SimDecider:
    commands: Consumer[DeciderInput]
    observations: Consumer[DeciderInput]
    events: Log[Envelope]
    on_event: Callable[[Envelope], None]
    # Each committed input with the events it caused, before those events' on_event.
    on_decided: Callable[[DeciderInput, list[Envelope]], None] = lambda _m, _e: None
    changelog: Log[Stored] = field(default_factory=Log)
    states: dict[StateKey, Stored] = field(default_factory=dict)
    staged_states: dict[StateKey, Stored] = field(default_factory=dict)
    staged_decisions: list[tuple[DeciderInput, list[Envelope]]] = field(default_factory=list)
    staged_inputs: int = 0
    dead_letters: int = 0

    def pending(self) -> bool:
        return self.commands.pending() or self.observations.pending()

    def consume(self, from_commands: bool) -> None:
        """Decide the next input of one topic, staged in the open transaction."""
        source = self.commands if from_commands else self.observations
        _, message = source.take()
        self.staged_inputs += 1
        key = (message.tenant, message.tx_id)
        stored = self.staged_states.get(key) or self.states.get(key)
        if isinstance(stored, FinishedTransaction):
            state = revive(stored)
        else:
            state = stored or initial_state(*key)
        if isinstance(message, OperationObserved) and state.status is None:
            self.dead_letters += 1
            return
        state, envelopes = handle(state, message)
        if not envelopes:
            return
        self.staged_states[key] = finish(state) if is_finished(state) else state
        self.staged_decisions.append((message, envelopes))

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
        self._clear()

    def abort(self) -> None:
        """An aborted transaction, or a crash: nothing staged happened; restore and
        read the inputs again from the committed offsets."""
        self._clear()
        self.commands.crash()
        self.observations.crash()
        latest = {(s.tenant, s.tx_id): s for s in self.changelog.records}  # compaction
        self.states = {}
        for key, stored in latest.items():
            # Through the bytes, as the real restore reads them.
            self.states[key] = parse_stored(stored.model_dump_json().encode())[0]

    def state_of(self, key: StateKey) -> TransactionState | None:
        stored = self.states.get(key)
        if stored is None:
            return None
        return revive(stored) if isinstance(stored, FinishedTransaction) else stored

    def _clear(self) -> None:
        self.staged_states = {}
        self.staged_decisions = []
        self.staged_inputs = 0
