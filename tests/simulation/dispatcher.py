"""A dispatcher process: at-least-once over recon.events, the projection check
(`over_because`, .in_flight) and the real classification, and each call the real plan of
services.dispatcher.call_plan (the one services.dispatcher.executor.Call executes),
interpreted here against the simulated provider, clock and `calls_begun` table: the gate
is always clear (no policy, no kill switch), a redelivery is a dispatch whose call was
begun, a redelivery looks up before it applies, a redelivered destructive call found
absent is not sent again, and a recorded abort stops a step's call never begun. Written
as a generator that yields how long it waits.

Offsets are committed only up to the oldest call still running: a crash drops the calls
and delivers their dispatches again; the `calls_begun` rows stay, as in Postgres.
"""

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from events.envelope import Envelope
from events.inputs import OperationObserved
from events.transaction_events import OperationDispatched
from services.dispatcher.call_plan import (
    Apply,
    Balance,
    Begin,
    Gate,
    Hold,
    Lookup,
    Report,
    Review,
    Sleep,
    WasBegun,
    call_plan,
    dispatch_observation,
)
from services.providers.classify import classify_lookup, classify_response, unreachable

from .calls_begun import SimCallsBegun
from .clock import Clock
from .in_flight import ProjectedOp, over_because
from .kafka import Consumer
from .provider import Provider

Wait = Generator[int, None, None]  # yields the milliseconds it sleeps


@dataclass
class Running:
    offset: int
    due: int
    steps: Wait


@dataclass
class SimDispatcher:
    events: Consumer[Envelope]
    provider: Provider
    clock: Clock
    projected: Callable[[str, str, str], ProjectedOp | None]
    report: Callable[[OperationObserved], object]
    begun: SimCallsBegun
    calls: list[Running] = field(default_factory=list)
    # Calls of a member that lost its partitions but kept running (see lose_partitions).
    zombies: list[Running] = field(default_factory=list)
    skipped: int = 0

    def consume(self) -> None:
        offset, envelope = self.events.take()
        if envelope.type != "OperationDispatched":
            return
        dispatch = envelope.event()
        assert isinstance(dispatch, OperationDispatched)
        if over_because(dispatch, self.projected(envelope.tenant, envelope.tx_id, dispatch.action)):
            self.skipped += 1
            return
        steps = self._call(envelope, dispatch)
        self.calls.append(Running(offset, self.clock.now, steps))

    def due(self) -> list[int]:
        return [i for i, c in enumerate(self.calls) if c.due <= self.clock.now]

    def resume(self, index: int, calls: list[Running] | None = None) -> None:
        calls = self.calls if calls is None else calls
        running = calls[index]
        try:
            running.due = self.clock.now + next(running.steps)
        except StopIteration:
            del calls[index]

    def zombies_due(self) -> list[int]:
        return [i for i, c in enumerate(self.zombies) if c.due <= self.clock.now]

    def resume_zombie(self, index: int) -> None:
        self.resume(index, self.zombies)

    def committable(self) -> int:
        """The offset a commit now stores: below the oldest call still running."""
        return min([c.offset for c in self.calls], default=self.events.position)

    def commit(self) -> None:
        self.events.commit(self.committable())

    def lose_partitions(self, pause_ms: int) -> None:
        """The group gave this member's partitions to another while it kept running (a
        long pause, a network partition): its calls go on after the pause as zombies,
        reporting with their own attempt numbers, while the new owner reads the
        uncommitted dispatches again. What the decider's attempt check is for."""
        for running in self.calls:
            running.due += pause_ms
        self.zombies.extend(self.calls)
        self.calls = []
        self.events.crash()

    def crash(self) -> None:
        self.calls = []
        self.events.crash()

    def _call(self, envelope: Envelope, dispatch: OperationDispatched) -> Wait:
        yield 0  # the call starts on its own step, so it interleaves with everything else
        key, leg, attempt = dispatch.op_key, dispatch.leg, dispatch.attempt
        plan = call_plan(dispatch)
        answer: Any = None
        while True:
            try:
                request = plan.send(answer)
            except StopIteration:
                return
            answer = None
            match request:
                case Gate():
                    answer = True
                case WasBegun():
                    answer = self.begun.was_begun(key, leg, attempt)
                    yield 0  # another dispatcher may begin the call meanwhile
                case Lookup():
                    answer = classify_lookup(*self.provider.lookup(self.clock.now, key))
                case Balance():
                    answer = (404, {"error": "no_such_charge"})  # the sandbox keeps none
                case Begin():
                    answer = self.begun.begin(envelope.tx_id, key, leg, attempt)
                    yield 0  # a crash may fall between the row and the call
                case Hold():
                    raise AssertionError("no kill switch is engaged in the simulation")
                case Apply():
                    sent = self.provider.apply(
                        self.clock.now, dispatch.operation, key, dispatch.payload
                    )
                    yield self.provider.rng.randint(5, 400)  # the response travels back
                    if sent is None:
                        answer = unreachable(TimeoutError("the provider did not answer in time"))
                    else:
                        answer = classify_response(*sent)
                case Sleep(seconds=seconds):
                    yield int(seconds * 1000)
                case Report():
                    self.report(dispatch_observation(envelope, dispatch, request, self.clock.at()))
                case Review():
                    raise AssertionError("no precondition can fail without balances")
