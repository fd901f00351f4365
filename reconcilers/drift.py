"""The drift scan's comparison: a provider's effects against recon's ledger.

Pure: no I/O, no clock (`now` comes in). The runtime lists the provider's effects and
loads the ledger (reconcilers.store), and reports what `compare` returns as
DriftDetected on recon.drift. Each finding's id is derived from what was found
(events.drift.drift_id), so the next scan, a second scanner or a replay finds the same
id and the drift is reported once.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from events.definition import Leg
from events.drift import DriftDetected, DriftKind, drift_id


@dataclass(frozen=True)
class Effect:
    """One effect as the provider lists it (docs/contract.md, `GET /v1/effects`)."""

    id: str
    operation: str
    idempotency_key: str
    payload: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class LedgerEntry:
    """One leg recon dispatched: the key and payload it sent, and whether it holds the
    leg confirmed (a forward leg that was compensated since still left its effect) or
    failed for good (a forward leg ended `failed`: refused, or resolved `not_applied`).

    An undo is never `failed` here: recon never settles on "the undo did not happen" (a
    review resolved `not_applied` sends it again under the same key, lookup first), so an
    undo's effect recon has not confirmed is in flight or under review, not drift. And a
    compensated step legitimately has both effects, its own and its undo's."""

    tenant: str
    tx_id: str
    action: str
    leg: Leg
    op_key: str
    provider: str
    operation: str
    payload: dict[str, Any]
    dispatched_at: datetime
    confirmed: bool
    failed: bool = False


class UnreadableEffect(ValueError):
    """The provider listed something that is not an effect; its account is not compared
    rather than guessed at (a missing key would look like an effect without intent, a
    time without a zone could fall either side of the window)."""


def effect_from_json(raw: Any) -> Effect:
    if not isinstance(raw, dict):
        raise UnreadableEffect(f"expected an object, got {type(raw).__name__}")
    try:
        payload = raw.get("payload") or {}
        if not isinstance(payload, dict):
            raise UnreadableEffect(f"effect {raw.get('id')!r}: payload is not an object")
        if raw.get("id") in (None, ""):
            # str() would name it "None": an id to report drift under that names nothing.
            raise UnreadableEffect("an effect without an id")
        return Effect(
            id=str(raw["id"]),
            operation=str(raw["operation"]),
            idempotency_key=str(raw["idempotency_key"]),
            payload=payload,
            created_at=created_instant(raw),
        )
    except (KeyError, ValueError) as error:
        raise UnreadableEffect(f"effect {raw.get('id')!r}: {error}") from None


def created_instant(raw: dict[str, Any]) -> datetime:
    """A listed effect's `created_at` as an instant: KeyError when it has none, ValueError
    when it is not ISO 8601 or names no zone (a naive time may fall either side of the
    window, or of a cut listing's edge)."""
    created_at = datetime.fromisoformat(str(raw["created_at"]))
    if created_at.tzinfo is None:
        raise ValueError(f"created_at {raw['created_at']!r} names no time zone")
    return created_at


# datetime's step, and Postgres's: the first instant strictly after another.
_STEP = timedelta(microseconds=1)
# What first_covered answers when a cut covers no instant: past every leg the ledger holds.
_NO_LEG = datetime.max.replace(tzinfo=UTC)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def cut_edge(covered_from: datetime, grace: timedelta) -> datetime | None:
    """The first dispatch instant whose leg a listing cut at `covered_from` covers, and
    every later one: a leg dispatched more than `grace` after the cut (the provider's clock
    may differ from recon's by that much, and an effect created at the cut's very instant
    may be among those the cut left out). None when it covers none: NOTHING_COVERED (a
    listing of unknown order, services.providers.interface), or a cut whose edge is out
    of datetime's range in UTC: past its last instant (an effect listed as created on
    9999-12-31, a grace from its end or west of Greenwich), where no leg can be, or before
    its first (on 0001-01-01 east of Greenwich, less than a grace after its first instant),
    where by the rule every leg would be covered: a listing dated so is not believed to
    prove anything absent (the safe side: no drift reported, the span kept as a hole).

    The one place the rule is written: `covers` judges a leg by it, `first_covered` bounds
    the ledger's read by it and reconcilers.drift_span.Span.left_out keeps what lies below
    it as a hole, so the three cannot disagree on a boundary."""
    # In durations from an epoch, which hold any instant's distance: the cut's own instant in
    # UTC may be out of datetime's range (0001-01-01T00:00+05:00) while its edge is not.
    try:
        return _EPOCH + ((covered_from - _EPOCH) + grace + _STEP)
    except OverflowError:
        return None


def covers(covered_from: datetime | None, grace: timedelta, dispatched_at: datetime) -> bool:
    """Whether a listing cut at `covered_from` (None: whole) that does not hold a leg's
    effect proves it absent: the leg was dispatched at or after the cut's edge (`cut_edge`).
    An older leg's effect may be one the cut left out, and a cut listing is no proof of
    absence; not covered is the safe side (no drift reported, none proved)."""
    if covered_from is None:
        return True
    edge = cut_edge(covered_from, grace)
    return edge is not None and dispatched_at >= edge


def first_covered(covered_from: datetime | None, grace: timedelta, since: datetime) -> datetime:
    """The earliest dispatch instant, from `since` on, whose leg `compare` may find without
    effect under a listing cut at `covered_from` (None: a whole listing, every leg since
    `since`): the ledger need not be read before it, but for the listed keys. A lower bound
    of `covers` (no leg dispatched before it is covered), and exact: every leg from it on
    is, unless the cut covers none (then datetime.max, past any leg)."""
    if covered_from is None:
        return since
    edge = cut_edge(covered_from, grace)
    return _NO_LEG if edge is None else max(since, edge)


def compare(
    *,
    provider: str,
    effects: list[Effect],
    account: str | None = None,
    ledger: list[LedgerEntry],
    known_keys: set[str],
    now: datetime,
    window_start: datetime,
    grace: timedelta,
    covered_from: datetime | None = None,
    judged_below: datetime | None = None,
) -> list[DriftDetected]:
    """`effects`: the provider's list (any age). `ledger`: recon's legs dispatched since
    `window_start`, and those under a listed key (which may be older). `known_keys`: which
    of the effects' keys recon ever issued, whatever their age, so an old intent is never
    mistaken for someone else's effect.

    `window_start`: the account's cursor (reconcilers.drift_span): effects created and legs
    dispatched before it were judged by an earlier scan and are not judged again, and those
    younger than `grace` are judged by a later one, so each is judged once.

    `account`: the tenant whose own provider account listed `effects` (None: the shared
    account); `ledger` then holds only the legs whose calls went to that account. An
    effect without intent in a tenant's own account is that tenant's drift, shown to it
    alone; in the shared account it belongs to no tenant.

    An effect younger than `grace` is not yet "without intent": the ledger is read from
    projections that may lag the provider (a slow projector), and the intake's intent rows
    are only one of the places known_keys looks.

    `covered_from`: None when `effects` is the provider's whole list (of the window); an
    instant when the listing was cut (services.providers.interface.EffectListing) and
    holds only the effects created after it. Every listed effect is still judged, but a
    leg's missing effect only for a leg the cut `covers` (dispatched more than `grace`
    after it).

    `judged_below`: None for a span up to `now` less the grace; an instant for a hole's
    span (reconcilers.drift_span.hole_span): a leg dispatched at or after it lies in the
    span above, judged by an earlier scan, and is not judged again; an effect, only from
    a grace past it on (its key still proves its leg's effect present, whatever its age).
    A hole whose top legs were given up (drift_span.Span.left_out) has its top a grace
    below the effects not yet judged, which its listing holds: those are judged, and
    what lies between was judged before and is filtered as reported."""
    detected_at = now.isoformat()
    by_key: dict[str, list[Effect]] = {}
    for effect in effects:
        by_key.setdefault(effect.idempotency_key, []).append(effect)
    entries = {e.op_key: e for e in ledger if e.provider == provider}
    where = provider if account is None else f"{provider} (tenant {account}'s own account)"
    found: list[DriftDetected] = []

    for effect in effects:
        if not _judged_now(effect, now, window_start, grace, judged_below):
            continue
        if effect.idempotency_key in entries or effect.idempotency_key in known_keys:
            continue
        found.append(
            DriftDetected(
                drift_id=drift_id(DriftKind.EFFECT_WITHOUT_INTENT, provider, effect.id, account),
                kind=DriftKind.EFFECT_WITHOUT_INTENT,
                provider=provider,
                tenant=account,
                effect_id=effect.id,
                detail={
                    "message": f"{where} holds {effect.operation} {effect.id} under key "
                    f"{effect.idempotency_key!r}, which no recon intent issued",
                    "operation": effect.operation,
                    "idempotency_key": effect.idempotency_key,
                    "payload": effect.payload,
                    "created_at": effect.created_at.isoformat(),
                },
                detected_at=detected_at,
            )
        )

    for entry in sorted(entries.values(), key=lambda e: (e.dispatched_at, e.op_key)):
        matching = by_key.get(entry.op_key, [])
        if not matching:
            due = (
                window_start <= entry.dispatched_at
                and now - entry.dispatched_at >= grace
                and (judged_below is None or entry.dispatched_at < judged_below)
            )
            if entry.confirmed and due and covers(covered_from, grace, entry.dispatched_at):
                found.append(_without_effect(entry, account, detected_at))
            continue
        for effect in matching:
            if not _judged_now(effect, now, window_start, grace, judged_below):
                continue
            differences = _differences(entry, effect)
            if entry.failed:
                # Reported whatever the payload: that the effect exists at all is the news.
                found.append(_after_failure(entry, effect, differences, account, detected_at))
            elif differences:
                found.append(_mismatch(entry, effect, differences, account, detected_at))
    return found


def _judged_now(
    effect: Effect,
    now: datetime,
    window_start: datetime,
    grace: timedelta,
    judged_below: datetime | None,
) -> bool:
    """Whether this scan judges `effect` (without intent, mismatch, after failure): created
    since `window_start` (the account's cursor, reconcilers.drift_span: what is older was
    judged by an earlier scan), past its grace (a younger one is judged by a later scan,
    once) and, in a hole's span, below a grace past its top (see `compare`). Its key still
    proves its leg's effect present, whatever its age."""
    return (
        window_start <= effect.created_at
        and now - effect.created_at >= grace
        and (judged_below is None or effect.created_at < judged_below + grace)
    )


def _owner(entry: LedgerEntry) -> dict[str, Any]:
    return {
        "tenant": entry.tenant,
        "tx_id": entry.tx_id,
        "action": entry.action,
        "op_key": entry.op_key,
    }


def _without_effect(entry: LedgerEntry, account: str | None, detected_at: str) -> DriftDetected:
    return DriftDetected(
        drift_id=drift_id(DriftKind.INTENT_WITHOUT_EFFECT, entry.provider, entry.op_key, account),
        kind=DriftKind.INTENT_WITHOUT_EFFECT,
        provider=entry.provider,
        **_owner(entry),
        detail={
            "message": f"recon holds {entry.operation} ({entry.leg.value} leg of "
            f"{entry.tx_id}/{entry.action}) confirmed, but {entry.provider} lists no effect "
            f"under key {entry.op_key!r}",
            "operation": entry.operation,
            "leg": entry.leg.value,
            "payload": entry.payload,
            "dispatched_at": entry.dispatched_at.isoformat(),
        },
        detected_at=detected_at,
    )


def _after_failure(
    entry: LedgerEntry,
    effect: Effect,
    differences: list[str],
    account: str | None,
    detected_at: str,
) -> DriftDetected:
    return DriftDetected(
        drift_id=drift_id(DriftKind.EFFECT_AFTER_FAILURE, entry.provider, effect.id, account),
        kind=DriftKind.EFFECT_AFTER_FAILURE,
        provider=entry.provider,
        **_owner(entry),
        effect_id=effect.id,
        detail={
            "message": f"recon holds {entry.operation} ({entry.leg.value} leg of "
            f"{entry.tx_id}/{entry.action}) failed, but {entry.provider} holds {effect.id} "
            f"under its key {entry.op_key!r}",
            "operation": entry.operation,
            "leg": entry.leg.value,
            "recon": {"state": "failed", "payload": entry.payload},
            "provider": {"operation": effect.operation, "payload": effect.payload},
            "fields": differences,
            "created_at": effect.created_at.isoformat(),
        },
        detected_at=detected_at,
    )


def _differences(entry: LedgerEntry, effect: Effect) -> list[str]:
    fields = sorted(
        key
        for key in entry.payload.keys() | effect.payload.keys()
        if entry.payload.get(key) != effect.payload.get(key)
        or (key in entry.payload) != (key in effect.payload)
    )
    if entry.operation != effect.operation:
        fields.insert(0, "operation")
    return fields


def _mismatch(
    entry: LedgerEntry,
    effect: Effect,
    differences: list[str],
    account: str | None,
    detected_at: str,
) -> DriftDetected:
    detail: dict[str, Any] = {
        "message": f"{effect.id} under key {entry.op_key!r} differs from what recon sent "
        f"in {', '.join(differences)}",
        "fields": differences,
        "recon": {"operation": entry.operation, "payload": entry.payload},
        "provider": {"operation": effect.operation, "payload": effect.payload},
    }
    if "amount" in differences:
        detail["amount"] = {
            "recon": entry.payload.get("amount"),
            "provider": effect.payload.get("amount"),
        }
    return DriftDetected(
        drift_id=drift_id(DriftKind.MISMATCH, entry.provider, effect.id, account),
        kind=DriftKind.MISMATCH,
        provider=entry.provider,
        **_owner(entry),
        effect_id=effect.id,
        detail=detail,
        detected_at=detected_at,
    )
