"""The manual-review queue (docs/contract.md, "Reviews and drift").

Reviews are read from the projection (`reviews`, opened and closed by the decider's
OperationNeedsReview / ReviewResolved events). A resolution is a ResolveReview command:
the `review_resolutions` row is the guard that lets one resolution through per review,
and the decider, not this API, moves the operation once the command is in Kafka. Every
query filters by tenant, so another tenant's review is answered 404 like a missing one.
A `retry` is a new attempt: refused `409 attempt_refused` when the decider would refuse
it (its own `decide`, on the projected log: services.intake.projected; a step that needed
approval needs a fresh one), and the review stays open.
"""

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Depends, Query, Request
from pydantic import ValidationError

from events.attempt_gate import ATTEMPT_REFUSED
from events.definition import Resolution, ReviewState
from events.inputs import ResolveReview
from events.keys import resolve_id
from services.config import Settings
from services.intake import auth, resolutions
from services.intake.errors import ApiError
from services.intake.openapi import errors, json_body, ok
from services.intake.pagination import MAX_LIMIT, Cursor, Limit, instant, pager
from services.intake.policy import operator
from services.intake.produce import produce_command
from services.intake.projected import refusal
from services.intake.resolutions import ResolveRequest, already_resolved
from services.intake.response_models import ReviewList, ReviewResolving, ReviewView
from services.intake.tenant_store import TenantStore

router = APIRouter()

# Older than this is every review there is; a larger value would overflow the date
# arithmetic (a 500), so it is refused with 422 instead.
MAX_OLDER_THAN_S = 100 * 365 * 86400


@router.get(
    "/v1/reviews", responses={**ok(ReviewList), **errors(401, 422, 503)}, response_model=None
)
async def list_reviews(
    request: Request,
    tenant: str = Depends(auth.tenant),
    state: ReviewState | None = None,
    older_than_s: Annotated[int | None, Query(ge=0, le=MAX_OLDER_THAN_S)] = None,
    limit: Limit = None,
    cursor: Cursor = None,
) -> dict[str, Any]:
    since = None if older_than_s is None else datetime.now(UTC) - timedelta(seconds=older_than_s)
    # `older_than_s` is relative to now, so the next page's cut-off would move: the cursor
    # binds the state only, and each page applies its own request's `older_than_s`.
    filters = {"state": state.value if state else None}
    page = pager(request, "reviews", tenant, filters, limit, cursor, default=MAX_LIMIT)
    after = page.after()
    async with request.app.state.pool.acquire() as conn:
        rows = await TenantStore(conn, tenant).reviews(
            state=state,
            created_before=since,
            after=None if after is None else (instant(after[0]), after[1]),
            limit=page.limit + 1,
        )
    shown, next_cursor = page.page(rows, lambda r: [r["created_at"].isoformat(), r["id"]])
    return {"reviews": [_summary(row) for row in shown], "next_cursor": next_cursor}


@router.get(
    "/v1/reviews/{review_id}",
    responses={**ok(ReviewView), **errors(401, 404, 422, 503)},
    response_model=None,
)
async def get_review(
    review_id: str, request: Request, tenant: str = Depends(auth.tenant)
) -> dict[str, Any]:
    async with request.app.state.pool.acquire() as conn:
        row = await TenantStore(conn, tenant).review(review_id)
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
    responses={**ok(ReviewResolving), **errors(401, 403, 404, 409, 413, 422, 503)},
    response_model=None,
    openapi_extra=json_body(ResolveRequest),
)
async def resolve_review(
    review_id: str, request: Request, who: Annotated[auth.Principal, Depends(operator)]
) -> dict[str, Any]:
    # Only a person settles an unknown (an agent must not settle its own): the operator
    # key names the resolver; an `actor` in the body (v0 clients) is ignored.
    assert who.operator is not None
    tenant = who.tenant
    try:
        parsed = ResolveRequest.model_validate_json(await request.body())
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise ApiError(422, "invalid_request", problems) from None
    body = parsed.model_copy(update={"actor": who.operator})
    settings: Settings = request.app.state.settings
    async with request.app.state.pool.acquire() as conn:
        store = TenantStore(conn, tenant)
        review = await store.review_state(review_id)
        if review is None:
            raise _not_found(review_id)
        if review["state"] != ReviewState.OPEN:
            raise already_resolved(review_id)
        command = ResolveReview(
            # One resolution per review: a client's retry produces the same command again,
            # which the decider recognises by its id.
            message_id=resolve_id(review_id),
            tenant=tenant,
            tx_id=review["tx_id"],
            review_id=review_id,
            resolution=body.resolution,
            note=body.note,
            actor=who.operator,
            issued_at=datetime.now(UTC),
        )
        if body.resolution is Resolution.RETRY:
            # A review takes one resolution (services.intake.resolutions): a retry the
            # decider would refuse (a new attempt needs what allowed the first, e.g. a live
            # approval) is answered here and leaves the review open for the next one.
            # The whole fold: the retry's gate needs the step's live approval (the
            # approval ledger), which no projected row holds.
            state = await store.projected_state(review["tx_id"])
            refused = refusal(state, command, {ATTEMPT_REFUSED})
            if refused is not None:
                raise ApiError(409, ATTEMPT_REFUSED, refused.rule)
        await resolutions.claim(store, review_id, body, settings.pending_horizon_s)
    await produce_command(request.app.state, command, f"the resolution of review {review_id}")
    async with request.app.state.pool.acquire() as conn:
        await resolutions.mark_produced(TenantStore(conn, tenant), review_id, body)
    return {"id": review_id, "state": "resolving", "resolution": body.resolution.value}


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
