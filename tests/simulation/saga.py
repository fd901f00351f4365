"""The saga orchestrator: the real `react` over recon.events, at-least-once (a crash
re-delivers the events since its last commit, and it issues their commands again)."""

from collections.abc import Callable
from dataclasses import dataclass

from events.envelope import Envelope
from events.inputs import Command
from services.saga.reactor import react

from .kafka import Consumer


@dataclass
class SimSaga:
    events: Consumer[Envelope]
    send: Callable[[Command], object]

    def consume(self) -> None:
        _, envelope = self.events.take()
        for command in react(envelope):
            self.send(command)
