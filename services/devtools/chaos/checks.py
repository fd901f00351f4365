"""The verdict of a chaos run: pure functions over its history (history.py).

No I/O, no clock: every check reads what was collected, so each can be shown to fail on a
fabricated bad history (tests/unit/test_chaos_checks.py). The transaction view is folded
here from the raw envelopes on purpose, not borrowed from the decider: a bug in the decider's
own fold must not be able to hide itself from the checks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from events.definition import FINISHED, Leg, OperationKind, Resolution, TxStatus
from events.envelope import Envelope, verify_chain
from events.legs import IN_FLIGHT, LegStatus
from services.devtools.chaos.history import History

# The names are imported (one vocabulary); the fold below is this module's own.
FORWARD, COMPENSATION = Leg.FORWARD.value, Leg.COMPENSATION.value
TERMINAL = frozenset({*FINISHED, TxStatus.MANUAL_REVIEW})
# A leg whose review a person resolved otherwise than `applied`: not a decider state, the
# checks only need to know it is not confirmed.
RESOLVED = "resolved"
# The provider stamps effects to the millisecond; recon's events carry microseconds.
CLOCK_GRAIN = timedelta(milliseconds=1)


@dataclass
class TxView:
    """One transaction as its events tell it."""

    tx_id: str
    accepted: bool = False
    status: TxStatus | None = None
    # action -> the OperationSpec JSON of TransactionAccepted, in the intent's order.
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    legs: dict[tuple[str, str], str] = field(default_factory=dict)
    # Positions (index in the log) of the events the ordering checks need.
    confirmed_at: dict[str, int] = field(default_factory=dict)
    compensated_at: dict[str, int] = field(default_factory=dict)
    compensation_dispatched_at: dict[str, int] = field(default_factory=dict)
    notify_dispatched_at: dict[str, int] = field(default_factory=dict)
    committed_at: int | None = None
    compensated_tx_at: int | None = None
    failed_at: int | None = None
    commit_time: datetime | None = None
    compensated_time: datetime | None = None
    planned: bool = False
    reviews: list[str] = field(default_factory=list)
    # (action, leg) -> provider effect ids seen in that leg's evidence, whatever became of it.
    seen_ids: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def of_kind(self, kind: str) -> list[str]:
        return [a for a, s in self.specs.items() if s.get("kind") == kind]

    def terminal(self) -> bool:
        return self.status in TERMINAL and not any(s in IN_FLIGHT for s in self.legs.values())


def fold(tx_id: str, envelopes: tuple[dict[str, Any], ...]) -> TxView:
    view = TxView(tx_id)
    for index, envelope in enumerate(envelopes):
        kind, data = envelope["type"], envelope.get("data", {})
        action = data.get("action", "")
        leg = data.get("leg", FORWARD)
        if kind == "OperationCompensated":
            leg = COMPENSATION
        evidence = data.get("evidence")
        if isinstance(evidence, dict) and evidence.get("remote_id"):
            view.seen_ids.setdefault((action, leg), set()).add(evidence["remote_id"])
        match kind:
            case "TransactionAccepted":
                view.accepted, view.status = True, TxStatus.ACCEPTED
                view.specs = {s["action"]: s for s in data["operations"]}
            case "OperationDispatched":
                view.legs[(action, leg)] = LegStatus.DISPATCHED
                if leg == COMPENSATION:
                    view.compensation_dispatched_at.setdefault(action, index)
                elif view.specs.get(action, {}).get("kind") != OperationKind.STEP:
                    view.notify_dispatched_at.setdefault(action, index)
            case "OperationUnknown":
                view.legs[(action, leg)] = LegStatus.UNKNOWN
            case "OperationConfirmed":
                view.legs[(action, FORWARD)] = LegStatus.CONFIRMED
                view.confirmed_at.setdefault(action, index)
            case "OperationFailed":
                view.legs[(action, FORWARD)] = LegStatus.FAILED
            case "OperationNeedsReview":
                view.legs[(action, leg)] = LegStatus.MANUAL_REVIEW
                view.reviews.append(f"{action} {leg}: {data.get('reason')}")
            case "OperationCompensated":
                view.legs[(action, COMPENSATION)] = LegStatus.CONFIRMED
                view.compensated_at.setdefault(action, index)
            case "ReviewResolved":
                applied = data.get("resolution") == Resolution.APPLIED
                view.legs[(action, leg)] = LegStatus.CONFIRMED if applied else RESOLVED
                if applied:
                    # A person's `applied` confirms the leg as a provider's answer would.
                    done = view.confirmed_at if leg == FORWARD else view.compensated_at
                    done.setdefault(action, index)
                if view.status is TxStatus.MANUAL_REVIEW:
                    view.status = TxStatus.COMPENSATING if view.planned else TxStatus.RUNNING
            case "TransactionCommitted":
                view.status, view.committed_at = TxStatus.COMMITTED, index
                view.commit_time = _time(envelope)
            case "TransactionFailed":
                view.status = TxStatus.COMPENSATING if data.get("compensable") else TxStatus.FAILED
                view.failed_at = index
            case "CompensationPlanned":
                view.planned = True
            case "TransactionCompensated":
                view.status, view.compensated_tx_at = TxStatus.COMPENSATED, index
                view.compensated_time = _time(envelope)
            case "TransactionNeedsReview":
                view.status = TxStatus.MANUAL_REVIEW
    return view


def _time(envelope: dict[str, Any]) -> datetime | None:
    raw = envelope.get("occurred_at")
    return datetime.fromisoformat(raw) if isinstance(raw, str) else None


def views(history: History) -> dict[str, TxView]:
    return {tx_id: fold(tx_id, envs) for tx_id, envs in history.events.items()}


def key_owners(all_views: dict[str, TxView]) -> dict[str, tuple[str, str, str]]:
    """Provider idempotency key -> (tx_id, action, leg)."""
    owners: dict[str, tuple[str, str, str]] = {}
    for view in all_views.values():
        for action, spec in view.specs.items():
            owners[spec["op_key"]] = (view.tx_id, action, FORWARD)
            if spec.get("compensation_key"):
                owners[spec["compensation_key"]] = (view.tx_id, action, COMPENSATION)
    return owners


# --- the checks ------------------------------------------------------------------------


def lost(history: History, all_views: dict[str, TxView]) -> list[str]:
    """Intents answered 2xx that never made it into the log."""
    return [
        s.tx_id
        for s in history.submitted
        if s.answered_2xx and not (s.tx_id in all_views and all_views[s.tx_id].accepted)
    ]


def stuck(all_views: dict[str, TxView]) -> list[str]:
    """Transactions in the log (answered or not: the intake may have died before answering)
    that are not terminal, or still have a call in flight."""
    return [
        f"{v.tx_id}: {v.status} {sorted(k for k, s in v.legs.items() if s in IN_FLIGHT)}"
        for v in all_views.values()
        if v.accepted and not v.terminal()
    ]


def duplicate_effects(history: History) -> list[str]:
    """More than one applied call per idempotency key at the provider."""
    applied: Counter[str] = Counter()
    for effect in history.effects:
        applied[effect.idempotency_key] += effect.applied_calls
    return [f"{key}: applied {n} times" for key, n in applied.items() if n > 1]


def unaccounted_effects(history: History, all_views: dict[str, TxView]) -> list[str]:
    """Effects at the provider that neither an operation recon holds applied nor a drift
    report accounts for (a charge recon thinks failed, an effect under a key nobody asked)."""
    owners = key_owners(all_views)
    reported = {d.effect_id for d in history.drift} | {d.op_key for d in history.drift}
    problems = []
    for effect in history.effects:
        if effect.effect_id in reported or effect.idempotency_key in reported:
            continue
        owner = owners.get(effect.idempotency_key)
        if owner is None:
            problems.append(f"{effect.effect_id} ({effect.operation}): no operation has its key")
            continue
        tx_id, action, leg = owner
        view = all_views[tx_id]
        state = view.legs.get((action, leg))
        # A leg in review whose evidence shows this very effect is accounted for: the person
        # deciding has it in front of them (the review itself is listed in the table).
        in_review = state == LegStatus.MANUAL_REVIEW and effect.effect_id in view.seen_ids.get(
            (action, leg), ()
        )
        if state != LegStatus.CONFIRMED and not in_review:
            problems.append(f"{effect.effect_id}: {tx_id}/{action} {leg} is {state}, not applied")
    return problems


def confirmed_without_effect(history: History, all_views: dict[str, TxView]) -> list[str]:
    """Operations recon holds confirmed that the provider has no effect for."""
    keys = {e.idempotency_key for e in history.effects}
    reported = {d.op_key for d in history.drift}
    problems = []
    for view in all_views.values():
        for (action, leg), state in view.legs.items():
            spec = view.specs.get(action, {})
            key = spec.get("op_key") if leg == FORWARD else spec.get("compensation_key")
            if state == LegStatus.CONFIRMED and key not in keys and key not in reported:
                problems.append(f"{view.tx_id}/{action} {leg}: no effect at the provider")
    return problems


def incomplete_commits(all_views: dict[str, TxView]) -> list[str]:
    """Committed transactions with a step not confirmed before the commit."""
    problems = []
    for view in all_views.values():
        if view.committed_at is None:
            continue
        for action in view.of_kind(OperationKind.STEP):
            at = view.confirmed_at.get(action)
            if at is None or at > view.committed_at:
                problems.append(f"{view.tx_id}: committed without {action} confirmed first")
    return problems


def bad_compensations(history: History, all_views: dict[str, TxView]) -> list[str]:
    """Compensated transactions whose confirmed steps were not all undone, one at a time, in
    reverse order (in the log, and at the provider)."""
    created = {e.idempotency_key: e.created_at for e in history.effects}
    problems = []
    for view in all_views.values():
        if view.compensated_tx_at is None:
            continue
        # The steps to undo are those confirmed before the transaction failed.
        before_failure = view.failed_at if view.failed_at is not None else 1 << 62
        confirmed = sorted(
            (at, a)
            for a, at in view.confirmed_at.items()
            if view.specs[a].get("kind") == OperationKind.STEP and at < before_failure
        )
        expected = [a for _, a in reversed(confirmed) if view.specs[a].get("compensation")]
        compensated = [a for a, _ in sorted(view.compensated_at.items(), key=lambda item: item[1])]
        if compensated != expected:
            problems.append(f"{view.tx_id}: compensated {compensated}, expected {expected}")
            continue
        # One at a time: the next undo is dispatched only after the previous is confirmed.
        for earlier, later in pairwise(expected):
            if view.compensation_dispatched_at.get(later, -1) < view.compensated_at[earlier]:
                problems.append(f"{view.tx_id}: undo of {later} sent before {earlier} undone")
        at_provider = [created.get(view.specs[a].get("compensation_key") or "") for a in expected]
        stamped = [t for t in at_provider if t is not None]
        if any(b < a for a, b in pairwise(stamped)):
            problems.append(f"{view.tx_id}: the provider applied the undos out of order")
    return problems


def early_notifications(history: History, all_views: dict[str, TxView]) -> list[str]:
    """A notification dispatched, or applied at the provider, before the transaction reached
    the state it waits for (on_commit: TransactionCommitted; on_compensated: compensated)."""
    created = {e.idempotency_key: e.created_at for e in history.effects}
    problems = []
    for view in all_views.values():
        for kind, at, when in (
            (OperationKind.ON_COMMIT, view.committed_at, view.commit_time),
            (OperationKind.ON_COMPENSATED, view.compensated_tx_at, view.compensated_time),
        ):
            for action in view.of_kind(kind):
                sent = view.notify_dispatched_at.get(action)
                if sent is not None and (at is None or sent < at):
                    problems.append(f"{view.tx_id}: {action} dispatched before {kind}")
                effect_at = created.get(view.specs[action]["op_key"])
                if effect_at is None:
                    continue
                if when is None:
                    problems.append(f"{view.tx_id}: {action} applied, never {kind}")
                elif effect_at + CLOCK_GRAIN < when:
                    problems.append(f"{view.tx_id}: {action} applied before {kind}")
    return problems


def broken_chains(history: History) -> list[str]:
    """seq contiguous from 1 and every hash chained, per transaction, as collected."""
    problems = []
    for tx_id, envelopes in history.events.items():
        parsed = [Envelope.model_validate(e) for e in envelopes]
        problems += [f"{tx_id}: {p}" for p in verify_chain(parsed)]
    return problems


# --- the verdict -----------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    submitted: int
    answered: int
    outcomes: dict[str, int]
    effects: int
    drift: int
    problems: dict[str, list[str]]
    # Not failures: operations the run sent to a person, and why (for the reader to judge).
    reviews: list[str]
    chains_valid: bool
    projections_equal: bool

    @property
    def ok(self) -> bool:
        return self.chains_valid and self.projections_equal and not any(self.problems.values())


def judge(history: History) -> Verdict:
    all_views = views(history)
    problems = {
        "lost": lost(history, all_views),
        "stuck": stuck(all_views),
        "duplicate effects": duplicate_effects(history),
        "unaccounted effects": unaccounted_effects(history, all_views),
        "confirmed without effect": confirmed_without_effect(history, all_views),
        "committed with a step unconfirmed": incomplete_commits(all_views),
        "compensations out of order": bad_compensations(history, all_views),
        "notifications before commit": early_notifications(history, all_views),
        "broken chains (collected log)": broken_chains(history),
    }
    outcomes = Counter(v.status.value for v in all_views.values() if v.accepted and v.status)
    return Verdict(
        submitted=len(history.submitted),
        answered=sum(1 for s in history.submitted if s.answered_2xx),
        outcomes=dict(sorted(outcomes.items())),
        effects=len(history.effects),
        drift=len(history.drift),
        problems=problems,
        reviews=[f"{v.tx_id}: {r}" for v in all_views.values() for r in v.reviews],
        chains_valid=history.audit_verify_ok and not problems["broken chains (collected log)"],
        projections_equal=history.rebuild_compare_ok,
    )


def table(verdict: Verdict, examples: int = 3) -> str:
    """The verdict as the table `make chaos` prints."""
    rows = [
        ("intents submitted / answered 2xx", f"{verdict.submitted} / {verdict.answered}", True),
        (
            "outcomes",
            ", ".join(f"{k} {n}" for k, n in verdict.outcomes.items()) or "none",
            True,
        ),
        ("effects at the provider / drift reports", f"{verdict.effects} / {verdict.drift}", True),
        ("operations sent to review (not a failure)", str(len(verdict.reviews)), True),
    ]
    rows += [(name, str(len(found)), not found) for name, found in verdict.problems.items()]
    rows += [
        (
            "chains valid (audit verify)",
            "yes" if verdict.chains_valid else "NO",
            verdict.chains_valid,
        ),
        (
            "projections equal (audit rebuild --compare)",
            "yes" if verdict.projections_equal else "NO",
            verdict.projections_equal,
        ),
    ]
    width = max(len(name) for name, _, _ in rows)
    lines = [f"{'check':<{width}}  result", f"{'-' * width}  ------"]
    for name, value, good in rows:
        lines.append(f"{name:<{width}}  {value}{'' if good else '   <-- FAIL'}")
    for name, found in verdict.problems.items():
        for problem in found[:examples]:
            lines.append(f"  {name}: {problem}")
    lines += [f"  review: {review}" for review in verdict.reviews[:examples]]
    lines.append(f"VERDICT: {'PASS' if verdict.ok else 'FAIL'}")
    return "\n".join(lines)
