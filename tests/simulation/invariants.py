"""The chaos runner's invariants, checked as the simulation goes: on every event the
decider commits and every effect the provider applies, and at the end on each
transaction's whole chain and the provider's ground truth.

Deliberately independent of the decider's own state: it reads the events' raw data and
counts provider calls, so a bug in `evolve` cannot hide a bug in `decide`.
"""

from dataclasses import dataclass, field

from events.catalog import SideEffect
from events.definition import Leg, OperationKind, OperationSpec, TxStatus
from events.envelope import GENESIS_HASH, Envelope, verify_chain
from events.inputs import DeciderInput, OperationObserved, Source
from transactions.side_effects import leg_info
from transactions.state import TransactionState
from transactions.transaction import is_terminal


class Violation(AssertionError):
    """An invariant broke; the message says which, and where."""


@dataclass
class TxWatch:
    specs: tuple[OperationSpec, ...]
    envelopes: list[Envelope] = field(default_factory=list)
    last_hash: str = GENESIS_HASH
    confirmed: set[str] = field(default_factory=set)
    compensated: set[str] = field(default_factory=set)
    committed: bool = False
    undone: bool = False  # TransactionCompensated
    failed: bool = False  # TransactionFailed: no step runs any more

    @property
    def steps(self) -> list[OperationSpec]:
        return [s for s in self.specs if s.kind is OperationKind.STEP]

    def spec(self, action: str) -> OperationSpec:
        return next(s for s in self.specs if s.action == action)


@dataclass
class Monitor:
    txs: dict[str, TxWatch] = field(default_factory=dict)
    # key -> (tx_id, action, is the compensation key)
    keys: dict[str, tuple[str, str, bool]] = field(default_factory=dict)
    # key -> the attempt last dispatched under it, read from OperationDispatched events.
    attempts: dict[str, int] = field(default_factory=dict)

    def expect(self, tx_id: str, specs: tuple[OperationSpec, ...]) -> None:
        self.txs[tx_id] = TxWatch(specs)
        for s in specs:
            self.keys[s.op_key] = (tx_id, s.action, False)
            if s.compensation_key is not None:
                self.keys[s.compensation_key] = (tx_id, s.action, True)

    def on_decided(self, message: DeciderInput, envelopes: list[Envelope]) -> None:
        """Zombies are fenced (DESIGN, promise 9): an observation of an attempt that is no
        longer the latest dispatched under its key moves nothing; the decider may only
        record that it ignored it. Its consequences at the provider are mostly masked
        (a re-send looks up first, and the provider deduplicates the key), so it is
        checked here, at the decision, from the events alone."""
        if not isinstance(message, OperationObserved) or message.source is Source.WEBHOOK:
            return
        latest = self.attempts.get(message.op_key, 0)
        if message.attempt == latest:
            return
        moved = [e.type for e in envelopes if e.type != "ObservationIgnored"]
        if moved:
            raise Violation(
                f"{message.tx_id} {message.action}: an observation of attempt "
                f"{message.attempt} ({message.source.value} {message.outcome.value}) moved "
                f"attempt {latest}: {moved}"
            )

    def on_event(self, env: Envelope) -> None:
        tx = self.txs[env.tx_id]
        where = f"{env.tx_id} seq {env.seq} {env.type}"
        if env.seq != len(tx.envelopes) + 1:
            raise Violation(f"{where}: seq not contiguous (after {len(tx.envelopes)})")
        if env.prev_hash != tx.last_hash:
            raise Violation(f"{where}: prev_hash is not the previous event's hash")
        # Each event's own hash is recomputed once, by verify_chain in `final`.
        tx.envelopes.append(env)
        tx.last_hash = env.hash
        data = env.data
        match env.type:
            case "OperationDispatched":
                self._dispatched(tx, where, data["action"], data["leg"])
                self.attempts[data["op_key"]] = data["attempt"]
            case "OperationConfirmed":
                tx.confirmed.add(data["action"])
            case "OperationCompensated":
                tx.compensated.add(data["action"])
            case "TransactionCommitted":
                missing = [s.action for s in tx.steps if s.action not in tx.confirmed]
                if missing or tx.compensated:
                    raise Violation(f"{where}: committed with steps {missing} not confirmed")
                tx.committed = True
            case "TransactionFailed":
                tx.failed = True
            case "TransactionCompensated":
                left = [s.action for s in tx.steps if s.action in tx.confirmed - tx.compensated]
                if left:
                    raise Violation(f"{where}: compensated with {left} not undone")
                tx.undone = True

    def _dispatched(self, tx: TxWatch, where: str, action: str, leg: str) -> None:
        spec = tx.spec(action)
        if leg == "compensation":
            if action not in tx.confirmed:
                raise Violation(f"{where}: undo of {action}, which was never confirmed")
            self._later_compensated(tx, where, action, tx.compensated)
            return
        if spec.kind is OperationKind.ON_COMMIT and not tx.committed:
            raise Violation(f"{where}: notification {action} dispatched before the commit")
        if spec.kind is OperationKind.ON_COMPENSATED and not tx.undone:
            raise Violation(f"{where}: {action} dispatched before TransactionCompensated")
        if spec.kind is OperationKind.STEP:
            if tx.committed:
                raise Violation(f"{where}: step {action} dispatched after the commit")
            for earlier in tx.steps[: tx.steps.index(spec)]:
                if earlier.action not in tx.confirmed:
                    raise Violation(
                        f"{where}: step {action} dispatched while {earlier.action} is not confirmed"
                    )

    def _later_compensated(self, tx: TxWatch, where: str, action: str, undone: set[str]) -> None:
        steps = tx.steps
        index = next(i for i, s in enumerate(steps) if s.action == action)
        for later in steps[index + 1 :]:
            if later.action in tx.confirmed and later.action not in undone:
                raise Violation(f"{where}: {action} undone before the later step {later.action}")

    def on_call(self, key: str, calls: int) -> None:
        """A call under `key` reached the provider (its `calls`-th). Only a dispatch the log
        holds is called: the decider calls once the transaction that holds it commits. A
        destructive operation is never sent again by a machine (events.retry_policy): each
        attempt dispatched under its key (the first, and each a person's `retry` asked
        for) calls once."""
        tx_id, action, is_compensation = self.keys[key]
        dispatched = self.attempts.get(key, 0)
        if not dispatched:
            raise Violation(
                f"{tx_id} {action}: called at the provider under {key} before any dispatch "
                "of it was committed"
            )
        spec = self.txs[tx_id].spec(action)
        operation = (
            spec.compensation.operation if is_compensation and spec.compensation else spec.operation
        )
        leg = Leg.COMPENSATION if is_compensation else Leg.FORWARD
        # The class the events recorded for the call: the decider's own reading.
        if leg_info(spec, leg).side_effect is not SideEffect.DESTRUCTIVE:
            return
        if calls > dispatched:
            raise Violation(
                f"{tx_id} {action} ({operation}): called {calls} times at the provider, "
                f"{dispatched} attempts dispatched"
            )

    def on_begun(self, tx_id: str, key: str, leg: Leg) -> None:
        """A call begun (its `calls_begun` row written: the first call of an attempt, by
        any path, a resumed hold's too): once TransactionFailed is committed no step runs
        any more (events.transaction_events), so no step's forward call, nor a
        notification of the commit, is begun after it. Undos and the compensation's
        notifications run then. A call begun before may still be sent again after it (a
        redelivery found absent): under the same key, which the provider answers as it
        answered the first."""
        tx = self.txs[tx_id]
        _, action, _ = self.keys[key]
        spec = tx.spec(action)
        if tx.failed and leg is Leg.FORWARD and spec.kind is not OperationKind.ON_COMPENSATED:
            raise Violation(f"{tx_id} {action}: {spec.kind.value} begun after TransactionFailed")

    def on_apply(self, key: str, applies: int, holds: dict[str, int]) -> None:
        """The provider applied an effect under `key` (its `applies`-th)."""
        tx_id, action, is_compensation = self.keys[key]
        tx = self.txs[tx_id]
        where = f"{tx_id} {action} ({'undo' if is_compensation else 'forward'}) at the provider"
        if applies > 1:
            raise Violation(f"{where}: applied {applies} times under one key")
        spec = tx.spec(action)
        if is_compensation:
            # The effects of later steps must already be undone at the provider.
            steps = tx.steps
            for later in steps[steps.index(spec) + 1 :]:
                if holds.get(later.op_key) and not holds.get(later.compensation_key or ""):
                    raise Violation(f"{where}: undone before the later step {later.action}")
        elif spec.kind is OperationKind.ON_COMMIT and not tx.committed:
            raise Violation(f"{where}: notification applied before its commit")
        elif spec.kind is OperationKind.ON_COMPENSATED and not tx.undone:
            raise Violation(f"{where}: applied before TransactionCompensated")

    def settled(self, tx_id: str, state: TransactionState | None) -> str | None:
        """Why the transaction has not settled yet, or None."""
        if state is None or not is_terminal(state) or state.status is TxStatus.MANUAL_REVIEW:
            return f"{tx_id} is {state.status if state else 'unknown to the decider'}"
        if any(op.open_review for op in state.operations):
            return f"{tx_id} has a review open"
        return None

    def final(self, tx_id: str, state: TransactionState, holds: dict[str, int]) -> None:
        """Once everything is quiet: the chain, and what the provider holds."""
        tx = self.txs[tx_id]
        problems = verify_chain(tx.envelopes)
        if problems:
            raise Violation(f"{tx_id}: chain invalid: {problems}")
        applied = {s.action for s in tx.specs if holds.get(s.op_key)}
        undone = {
            s.action for s in tx.steps if s.compensation_key and holds.get(s.compensation_key)
        }
        where = f"{tx_id} ({state.status})"
        for s in tx.steps:
            if state.status is TxStatus.COMMITTED and s.action not in applied:
                raise Violation(f"{where}: step {s.action} has no effect at the provider")
            if state.status is not TxStatus.COMMITTED and s.action in applied - undone:
                raise Violation(f"{where}: the effect of {s.action} is left in place")
            if state.status is TxStatus.COMMITTED and s.action in undone:
                raise Violation(f"{where}: the effect of {s.action} was undone")
        for s in tx.specs:
            if s.kind is OperationKind.ON_COMMIT and (s.action in applied) != tx.committed:
                raise Violation(f"{where}: on_commit {s.action} applied={s.action in applied}")
