"""The intake's store of natural-key claims: the `natural_keys` rows and the locks that make
two submissions of one business intent meet in one place (events.intent_identity judges).

Why a Postgres claim and not the decider: the decider is the single writer per partition of
`tenant/tx_id`, and two re-planned submissions carry two tx_ids, so they land in two
partitions that no decider sees together. The row keyed (tenant, operation, natural_key) is
that one place: its primary key makes two racing claims wait for each other, whichever door
(HTTP, the Kafka intents topic, MCP through the SDK) and whichever intake process they came
through, since every door accepts through services.intake.accept.

The two steps and a crash between them: the claim is written in the same Postgres
transaction as the `intents` row, before the SubmitTransaction is produced (step 1), and the
row is marked `produced` after Kafka's acknowledgement (step 2). A crash between the steps
leaves a claim whose holder is not a promise: another tx_id is answered `intent_pending`
until the pending horizon has passed (the holder's command is then in the log or never will
be); then, with no transaction projected for the holder, the claim passes to the new
submission, and a late retry of the holder's own tx_id is answered `duplicate_intent`. A
retry of the holder's tx_id before then reclaims it (verdict `own`). The one case this
cannot see is the `intents` guard's own (services.intake.intents): a holder whose command
landed while the decider or the projector lags by more than the horizon.

Called inside the caller's transaction (services.intake.intents.claim), so a refusal
rolls back the `intents` row too: nothing is recorded.
"""

from collections.abc import Mapping
from typing import Any

import asyncpg

from events.catalog import DEFAULT_NATURAL_KEY_WINDOW_S
from events.definition import OperationKind, OperationSpec
from events.intent_identity import Holder, Verdict, judge, step_fingerprint
from services.intake.errors import ApiError, not_yet_known


async def claim_keys(
    conn: asyncpg.Connection,
    tenant: str,
    tx_id: str,
    specs: tuple[OperationSpec, ...],
    horizon_s: float,
    windows: Mapping[str, int],
) -> tuple[OperationSpec, ...]:
    """Claim every natural key `specs` name for `tx_id`, or raise the 409; answer the specs
    to record, a step whose key another transaction holds with another payload gated on a
    person's approval."""
    verdicts: dict[str, OperationSpec] = {}
    # In one order for every submission, so two that name the same keys never deadlock.
    named = sorted(
        (s for s in specs if s.natural_key is not None),
        key=lambda s: (s.operation, s.natural_key or ""),
    )
    for spec in named:
        window_s = windows.get(spec.action, DEFAULT_NATURAL_KEY_WINDOW_S)
        verdicts[spec.action] = await _claim_one(conn, tenant, tx_id, spec, horizon_s, window_s)
    return tuple(verdicts.get(spec.action, spec) for spec in specs)


async def as_judged(
    conn: asyncpg.Connection,
    tenant: str,
    tx_id: str,
    specs: tuple[OperationSpec, ...],
    horizon_s: float,
) -> tuple[OperationSpec, ...]:
    """The specs as `claim_keys` would answer them now, claiming nothing and refusing
    nothing: what a preview shows, so that a step sent to a person by its natural key is
    previewed as waiting for approval and the operator's approval of that digest holds."""
    judged = []
    for spec in specs:
        if spec.natural_key is not None and spec.kind is OperationKind.STEP:
            holder, _ = await _holder(conn, tenant, spec.operation, spec.natural_key, lock=False)
            step = step_fingerprint(spec.provider, spec.operation, spec.payload)
            if holder is not None and judge(holder, tx_id, step, horizon_s) is Verdict.DIFFERS:
                spec = _to_a_person(spec, holder)
        judged.append(spec)
    return tuple(judged)


async def release_keys(conn: asyncpg.Connection, tenant: str, tx_id: str) -> None:
    """Drop the claims of a body that never landed, when another body takes its tx_id over."""
    await conn.execute("DELETE FROM natural_keys WHERE tenant = $1 AND tx_id = $2", tenant, tx_id)


async def _claim_one(
    conn: asyncpg.Connection,
    tenant: str,
    tx_id: str,
    spec: OperationSpec,
    horizon_s: float,
    window_s: int,
) -> OperationSpec:
    step = step_fingerprint(spec.provider, spec.operation, spec.payload)
    coordinates = (tenant, spec.operation, spec.natural_key)
    # A racing claim of the same key waits here for the other's transaction to end.
    inserted = await conn.fetchval(
        "INSERT INTO natural_keys"
        " (tenant, operation, natural_key, tx_id, action, step_fingerprint, expires_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))"
        " ON CONFLICT (tenant, operation, natural_key) DO NOTHING RETURNING 1",
        *coordinates,
        tx_id,
        spec.action,
        step,
        float(window_s),
    )
    if inserted:
        return spec
    holder, status = await _holder(conn, *coordinates)
    verdict = judge(holder, tx_id, step, horizon_s)
    match verdict:
        case Verdict.TAKE | Verdict.OWN:
            # An upsert: a claim released meanwhile (its tx_id taken over) is gone.
            await conn.execute(
                "INSERT INTO natural_keys"
                " (tenant, operation, natural_key, tx_id, action, step_fingerprint, expires_at)"
                " VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))"
                " ON CONFLICT (tenant, operation, natural_key) DO UPDATE SET"
                " tx_id = $4, action = $5, step_fingerprint = $6,"
                # A retry of the holder keeps its window; a new holder starts one.
                " claimed_at = CASE WHEN natural_keys.tx_id = $4"
                " THEN natural_keys.claimed_at ELSE now() END,"
                " expires_at = CASE WHEN natural_keys.tx_id = $4 THEN natural_keys.expires_at"
                " ELSE now() + make_interval(secs => $7) END",
                *coordinates,
                tx_id,
                spec.action,
                step,
                float(window_s),
            )
            return spec
        case Verdict.PENDING:
            assert holder is not None
            raise not_yet_known(
                "intent_pending",
                f"natural_key {spec.natural_key!r} of {spec.operation} was claimed by "
                f"transaction {holder.tx_id!r}, a submission",
                horizon_s - holder.attempt_age_s,
                f"this submission will be refused with duplicate_intent naming {holder.tx_id!r}",
            )
        case Verdict.DUPLICATE:
            assert holder is not None
            raise _duplicate(spec, holder, status, "the same call")
        case Verdict.DIFFERS:
            assert holder is not None
            if spec.kind is not OperationKind.STEP:
                # A notification runs without anyone to approve it: refused instead.
                raise _duplicate(spec, holder, status, "another payload")
            return _to_a_person(spec, holder)


async def _holder(
    conn: asyncpg.Connection,
    tenant: str,
    operation: str,
    natural_key: str | None,
    *,
    lock: bool = True,
) -> tuple[Holder | None, str]:
    """The key's holder, its row locked (`lock`) until the caller's transaction ends. Read in two
    statements on purpose: the lock may wait for a racing claim's commit, and only a
    statement begun after it sees that claimant's `intents` row (a join in the locking
    statement would read it from the snapshot taken before the wait, and miss it)."""
    claim = await conn.fetchrow(
        "SELECT tx_id, action, step_fingerprint, expires_at <= now() AS expired"
        " FROM natural_keys WHERE tenant = $1 AND operation = $2 AND natural_key = $3"
        + (" FOR UPDATE" if lock else ""),
        tenant,
        operation,
        natural_key,
    )
    if claim is None:  # released by a takeover of its tx_id meanwhile
        return None, ""
    state = await conn.fetchrow(
        "SELECT coalesce(i.produced, false) AS produced,"
        " coalesce(extract(epoch FROM now() - i.attempted_at)::float8, 'Infinity') AS age_s,"
        " (SELECT status FROM transactions t WHERE t.tenant = $1 AND t.tx_id = $2) AS status"
        " FROM (SELECT 1) one"
        " LEFT JOIN intents i ON i.tenant = $1 AND i.tx_id = $2",
        tenant,
        claim["tx_id"],
    )
    status = state["status"]
    holder = Holder(
        tx_id=claim["tx_id"],
        action=claim["action"],
        step_fingerprint=claim["step_fingerprint"],
        expired=claim["expired"],
        landed=state["produced"] or status is not None,
        attempt_age_s=state["age_s"],
    )
    # Not projected yet: Kafka has it, the decider has not answered.
    return holder, status or "accepted"


def _to_a_person(spec: OperationSpec, holder: Holder) -> OperationSpec:
    return spec.model_copy(update={"approval_required": True, "natural_key_held_by": holder.tx_id})


def _duplicate(spec: OperationSpec, holder: Holder, status: str, what: str) -> ApiError:
    details: dict[str, Any] = {
        "tx_id": holder.tx_id,
        "action": holder.action,
        "status": status,
        "operation": spec.operation,
        "natural_key": spec.natural_key,
    }
    return ApiError(
        409,
        "duplicate_intent",
        f"action {spec.action!r}: natural_key {spec.natural_key!r} of {spec.operation} is held "
        f"by transaction {holder.tx_id!r} (action {holder.action!r}, status {status}) with "
        f"{what}; nothing was sent. Follow {holder.tx_id!r} (GET /v1/transactions/"
        f"{holder.tx_id}) instead of resubmitting, and reuse one tx_id on every retry",
        details={"duplicate_of": details},
    )
