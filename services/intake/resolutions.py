"""The guard that lets one resolution through per review: the `review_resolutions` row,
claimed before the ResolveReview command is produced and marked once Kafka acknowledged
it (the reasoning of services.intake.intents, applied to reviews).

A store, not a route: its statements are a rule of their own, bound to the tenant of the
route's TenantStore (services.intake.tenant_store), the authenticated operator's. A review
id is derived from its tenant (events.keys.review_id), so the id names one tenant's row.
"""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from events.definition import Resolution
from services.intake.errors import ApiError, not_yet_known
from services.intake.tenant_store import TenantStore

_REFUSED_LATER = "this one will be refused with review_already_resolved"


class ResolveRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    resolution: Resolution
    note: Annotated[str, Field(max_length=4000)]
    # Deprecated and ignored: the resolver is the operator key's person (docs/contract.md, v1
    # "Roles"); still accepted so v0 bodies are not refused.
    actor: Annotated[str | None, Field(min_length=1, max_length=256)] = None


async def claim(store: TenantStore, review_id: str, body: ResolveRequest, horizon_s: float) -> None:
    """The first resolution claims the review. The same resolution again is let through to
    produce while its command is not known to be in Kafka (the client retrying after a 503
    or a crash). A different one is refused with 409 once the claim's command was
    acknowledged; before that, it takes the claim over only when the last attempt is older
    than RECON_PENDING_HORIZON_S (past the intake producer's delivery bound, so the first
    command is in the log or never will be) and the review is still open in the projection
    (the caller checked): the reasoning of services.intake.intents, applied to reviews."""
    conn = store.conn
    async with conn.transaction():
        inserted = await conn.fetchval(
            "INSERT INTO review_resolutions (review_id, tenant, resolution, note, actor)"
            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (review_id) DO NOTHING RETURNING 1",
            review_id,
            store.tenant,
            body.resolution.value,
            body.note,
            body.actor,
        )
        if inserted:
            return
        # The row the insert met, by the key it met on.
        claim = await conn.fetchrow(
            "SELECT resolution, note, actor, produced,"
            " extract(epoch FROM now() - attempted_at)::float8 AS age_s"
            " FROM review_resolutions WHERE review_id = $1 FOR UPDATE",
            review_id,
        )
        if claim["produced"]:
            raise already_resolved(review_id)
        same = (claim["resolution"], claim["note"], claim["actor"]) == (
            body.resolution.value,
            body.note,
            body.actor,
        )
        if not same and claim["age_s"] <= horizon_s:
            raise pending(review_id, horizon_s - claim["age_s"])
        # A new attempt (the same resolution again, or a different one over a claim whose
        # command can no longer land): the horizon counts from it.
        await conn.execute(
            "UPDATE review_resolutions SET resolution = $3, note = $4, actor = $5,"
            " attempted_at = now() WHERE review_id = $1 AND tenant = $2",
            review_id,
            store.tenant,
            body.resolution.value,
            body.note,
            body.actor,
        )


async def mark_produced(store: TenantStore, review_id: str, body: ResolveRequest) -> None:
    await store.conn.execute(
        "UPDATE review_resolutions SET produced = true"
        " WHERE review_id = $1 AND tenant = $2 AND resolution = $3 AND note = $4 AND actor = $5",
        review_id,
        store.tenant,
        body.resolution.value,
        body.note,
        body.actor,
    )


def already_resolved(review_id: str) -> ApiError:
    return ApiError(
        409,
        "review_already_resolved",
        f"review {review_id!r} already has a resolution; see GET /v1/reviews/{review_id}",
    )


def pending(review_id: str, remaining_s: float) -> ApiError:
    what = f"review {review_id!r} has a different resolution"
    return not_yet_known("resolution_pending", what, remaining_s, _REFUSED_LATER)
