"""The dispatcher process: at-least-once over recon.events, the real projection check
(`over_because`) and classification, and each call as services.dispatcher.runtime.Call
does it (look up first on a redelivery or a retry, apply, resolve an unknown by lookups
with backoff), written as a generator that yields how long it waits.

Offsets are committed only up to the oldest call still running: a crash drops the calls
and delivers their dispatches again, read as redeliveries (lookup first).
"""

from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from events.envelope import Envelope
from events.inputs import OperationObserved, Outcome, Source
from events.transaction_events import OperationDispatched
from services.dispatcher.in_flight import ProjectedOp, over_because
from services.dispatcher.runtime import LOOKUP_BACKOFF_S
from services.providers.classify import Seen, classify_lookup, classify_response, unreachable

from .clock import Clock
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
    calls: list[Running] = field(default_factory=list)
    # Calls of a member that lost its partitions but kept running (see lose_partitions).
    zombies: list[Running] = field(default_factory=list)
    replay_until: int = 0
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
        redelivered = offset < self.replay_until
        steps = self._call(envelope, dispatch, dispatch.lookup_first or redelivered)
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
        self.replay_until = self.events.log.end

    def crash(self) -> None:
        self.calls = []
        self.events.crash()
        self.replay_until = self.events.log.end  # the end offsets when it took the partition

    def _call(self, envelope: Envelope, dispatch: OperationDispatched, lookup_first: bool) -> Wait:
        lookups = 0
        key = dispatch.op_key

        def lookup() -> Seen:
            nonlocal lookups
            lookups += 1
            return classify_lookup(*self.provider.lookup(self.clock.now, key))

        def report(source: Source, seen: Seen) -> None:
            self.report(
                OperationObserved(
                    message_id=f"{key}:{dispatch.attempt}:{source.value}:"
                    f"{seen.outcome.value}:{lookups}",
                    tenant=envelope.tenant,
                    tx_id=envelope.tx_id,
                    action=dispatch.action,
                    op_key=key,
                    attempt=dispatch.attempt,
                    source=source,
                    outcome=seen.outcome,
                    status_code=seen.status_code,
                    remote_id=seen.remote_id,
                    body=seen.body,
                    error=seen.error,
                    observed_at=self.clock.at(),
                    by_dispatcher=True,
                )
            )

        def resolve() -> Wait:
            seen: Seen | None = None
            for delay in LOOKUP_BACKOFF_S:
                yield int(delay * 1000)
                seen = lookup()
                if seen.outcome in (Outcome.SUCCEEDED, Outcome.ABSENT):
                    break
            if seen is not None:
                report(Source.LOOKUP, seen)

        yield 0  # the call starts on its own step, so it interleaves with everything else
        if lookup_first:
            seen = lookup()
            if seen.outcome is not Outcome.ABSENT:
                report(Source.LOOKUP, seen)
                if seen.outcome is not Outcome.SUCCEEDED:
                    yield from resolve()
                return
        answer = self.provider.apply(self.clock.now, dispatch.operation, key, dispatch.payload)
        yield self.provider.rng.randint(5, 400)  # the response travels back
        if answer is None:
            seen = unreachable(TimeoutError("the provider did not answer in time"))
        else:
            seen = classify_response(*answer)
        report(Source.RESPONSE, seen)
        if seen.outcome is Outcome.UNKNOWN:
            yield from resolve()
