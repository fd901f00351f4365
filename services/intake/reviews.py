"""The manual-review queue (CONTRACT.md, "Reviews and drift").

Reviews are read from the projection (`reviews`, opened and closed by the decider's
OperationNeedsReview / ReviewResolved events). A resolution is a ResolveReview command:
the `review_resolutions` row is the guard that lets one resolution through per review,
and the decider, not this API, moves the operation once the command is in Kafka. Every
query filters by tenant, so another tenant's review is answered 404 like a missing one.
"""

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

import asyncpg
from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from events.definition import Resolution
from events.inputs import ResolveReview
from events.keys import partition_key, resolve_id
from services.config import Settings
from services.intake import auth
from services.intake.errors import ApiError
from services.intake.openapi import errors, json_body, ok
from services.intake.produce import produce_acked
from services.intake.response_models import ReviewList, ReviewResolving, ReviewView

router = APIRouter()

# Older than this is every review there is; a larger value would overflow the date
# arithmetic (a 500), so it is refused with 422 instead.
MAX_OLDER_THAN_S = 100 * 365 * 86400

_SUMMARY = "r.id, r.tx_id, r.action, r.op_key, r.reason, r.state, r.created_at"


class ResolveRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    resolution: Resolution
    note: Annotated[str, Field(max_length=4000)]
    actor: Annotated[str, Field(min_length=1, max_length=256)]


@router.get(
    "/v1/reviews", responses={**ok(ReviewList), **errors(401, 422, 503)}, response_model=None
)
async def list_reviews(
    request: Request,
    tenant: str = Depends(auth.tenant),
    state: Literal["open", "resolved"] | None = None,
    older_than_s: Annotated[int | None, Query(ge=0, le=MAX_OLDER_THAN_S)] = None,
) -> dict[str, Any]:
    conditions: list[str] = ["r.tenant = $1"]
    args: list[object] = [tenant]
    if state is not None:
        args.append(state)
        conditions.append(f"r.state = ${len(args)}")
    if older_than_s is not None:
        args.append(datetime.now(UTC) - timedelta(seconds=older_than_s))
        conditions.append(f"r.created_at <= ${len(args)}")
    async with request.app.state.pool.acquire() as conn:
        rows = await conn.fetch(
            f"SELECT {_SUMMARY} FROM reviews r WHERE {' AND '.join(conditions)}"
            " ORDER BY r.created_at, r.id",
            *args,
        )
    return {"reviews": [_summary(row) for row in rows]}


@router.get(
    "/v1/reviews/{review_id}",
    responses={**ok(ReviewView), **errors(401, 404, 422, 503)},
    response_model=None,
)
async def get_review(
    review_id: str, request: Request, tenant: str = Depends(auth.tenant)
) -> dict[str, Any]:
    async with request.app.state.pool.acquire() as conn:
        row = await conn.fetchrow(
            f"SELECT {_SUMMARY}, r.leg, r.attempt, r.resolved_at, r.resolution, r.note,"
            " r.actor, o.operation, o.provider, o.evidence"
            " FROM reviews r LEFT JOIN operations o"
            " ON o.tenant = r.tenant AND o.tx_id = r.tx_id AND o.action = r.action"
            " WHERE r.tenant = $1 AND r.id = $2",
            tenant,
            review_id,
        )
    if row is None:
        raise _not_found(review_id)
    return {
        **_summary(row),
        "leg": row["leg"],
        "attempt": row["attempt"],
        "operation": row["operation"],
        "provider": row["provider"],
        "resolved_at": row["resolved_at"].isoformat() if row["resolved_at"] else None,
        "resolution": row["resolution"],
        "note": row["note"],
        "actor": row["actor"],
        # The operation's whole trail: responses, lookups, webhooks, earlier resolutions.
        "evidence": json.loads(row["evidence"]) if row["evidence"] else [],
    }


@router.post(
    "/v1/reviews/{review_id}/resolve",
    responses={**ok(ReviewResolving), **errors(401, 404, 409, 413, 422, 503)},
    response_model=None,
    openapi_extra=json_body(ResolveRequest),
)
async def resolve_review(
    review_id: str, request: Request, tenant: str = Depends(auth.tenant)
) -> dict[str, Any]:
    try:
        body = ResolveRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise ApiError(422, "invalid_request", problems) from None
    settings: Settings = request.app.state.settings
    async with request.app.state.pool.acquire() as conn:
        review = await conn.fetchrow(
            "SELECT tx_id, state FROM reviews WHERE tenant = $1 AND id = $2", tenant, review_id
        )
        if review is None:
            raise _not_found(review_id)
        if review["state"] != "open":
            raise _already_resolved(review_id)
        await _claim(conn, tenant, review_id, body, settings.pending_horizon_s)
    command = ResolveReview(
        # One resolution per review: a client's retry produces the same command again,
        # which the decider recognises by its id.
        message_id=resolve_id(review_id),
        tenant=tenant,
        tx_id=review["tx_id"],
        review_id=review_id,
        resolution=body.resolution,
        note=body.note,
        actor=body.actor,
        issued_at=datetime.now(UTC),
    )
    await produce_acked(
        request.app.state.producer,
        settings.topics.commands,
        partition_key(tenant, review["tx_id"]),
        command.model_dump_json().encode(),
        f"the resolution of review {review_id}",
    )
    async with request.app.state.pool.acquire() as conn:
        await conn.execute(
            "UPDATE review_resolutions SET produced = true"
            " WHERE review_id = $1 AND resolution = $2 AND note = $3 AND actor = $4",
            review_id,
            body.resolution.value,
            body.note,
            body.actor,
        )
    return {"id": review_id, "state": "resolving", "resolution": body.resolution.value}


async def _claim(
    conn: asyncpg.Connection, tenant: str, review_id: str, body: ResolveRequest, horizon_s: float
) -> None:
    """The first resolution claims the review. The same resolution again is let through to
    produce while its command is not known to be in Kafka (the client retrying after a 503
    or a crash). A different one is refused with 409 once the claim's command was
    acknowledged; before that, it takes the claim over only when the last attempt is older
    than RECON_PENDING_HORIZON_S (past the intake producer's delivery bound, so the first
    command is in the log or never will be) and the review is still open in the projection
    (the caller checked): the reasoning of services.intake.intents, applied to reviews."""
    async with conn.transaction():
        inserted = await conn.fetchval(
            "INSERT INTO review_resolutions (review_id, tenant, resolution, note, actor)"
            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (review_id) DO NOTHING RETURNING 1",
            review_id,
            tenant,
            body.resolution.value,
            body.note,
            body.actor,
        )
        if inserted:
            return
        claim = await conn.fetchrow(
            "SELECT resolution, note, actor, produced,"
            " extract(epoch FROM now() - attempted_at)::float8 AS age_s"
            " FROM review_resolutions WHERE review_id = $1 FOR UPDATE",
            review_id,
        )
        if claim["produced"]:
            raise _already_resolved(review_id)
        same = (claim["resolution"], claim["note"], claim["actor"]) == (
            body.resolution.value,
            body.note,
            body.actor,
        )
        if not same and claim["age_s"] <= horizon_s:
            raise _pending(review_id, horizon_s - claim["age_s"])
        # A new attempt (the same resolution again, or a different one over a claim whose
        # command can no longer land): the horizon counts from it.
        await conn.execute(
            "UPDATE review_resolutions SET resolution = $2, note = $3, actor = $4,"
            " attempted_at = now() WHERE review_id = $1",
            review_id,
            body.resolution.value,
            body.note,
            body.actor,
        )


def _summary(row: asyncpg.Record) -> dict[str, Any]:
    return {
        "id": row["id"],
        "tx_id": row["tx_id"],
        "action": row["action"],
        "op_key": row["op_key"],
        "reason": row["reason"],
        "state": row["state"],
        "created_at": row["created_at"].isoformat(),
    }


def _not_found(review_id: str) -> ApiError:
    return ApiError(
        404, "not_found", f"no review {review_id!r} for this API key's tenant; check the id"
    )


def _already_resolved(review_id: str) -> ApiError:
    return ApiError(
        409,
        "review_already_resolved",
        f"review {review_id!r} already has a resolution; see GET /v1/reviews/{review_id}",
    )


def _pending(review_id: str, remaining_s: float) -> ApiError:
    return ApiError(
        409,
        "resolution_pending",
        f"review {review_id!r} has a different resolution that Kafka has not acknowledged, "
        "and whether it was recorded is still being determined; retry in "
        f"{max(1, round(remaining_s))} s (if it was recorded, this one will be refused with "
        "review_already_resolved)",
    )
