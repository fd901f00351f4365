"""`GET /v1/catalog` (docs/contract.md, "v1 additions"): every configured provider's operations
as its adapter declares them (services.providers.registry.catalog_of): the side-effect class
and reversibility the retry policy and the approval gate read, the one undo each allows, the
payload's JSON Schema the door checks and the field quotas count, so an agent can tell
before it submits what will need an approval, what cannot be undone and what to send. Any
key of the tenant may read it."""

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from events.catalog import Reversibility, SideEffect
from services.intake import auth
from services.intake.openapi import errors, ok
from services.providers.registry import catalog_of

router = APIRouter()


class CatalogEntry(BaseModel):
    provider: str
    operation: str
    # `class` is a Python keyword: the field carries it as its alias (the answer's name).
    side_effect: SideEffect = Field(alias="class")
    reversibility: Reversibility
    # The one operation a step's `compensation` may name (events.catalog); None: it has none.
    compensation: str | None = None
    # v1 published this as `undo`; kept, equal to `compensation`, for one release so a
    # client reading it has time to move (docs/contract.md, "Governance").
    undo: str | None = Field(
        default=None, deprecated=True, description="Deprecated: the same as `compensation`."
    )
    # The JSON Schema (draft 2020-12) a step's payload must satisfy, checked at the door
    # (`422 invalid_payload` naming the field); None: the provider declares none.
    payload_schema: dict[str, Any] | None = None
    # The payload field quotas count as the amount (`max_amount`); None: no money moves.
    amount_field: str | None = None
    # How the undo's payload is built from the confirmed step (undo field -> `$remote_id`,
    # `$op_key` or a pointer into the step's payload); None: the step's payload with
    # `reverses`.
    undo_payload: dict[str, str] | None = None


class Catalog(BaseModel):
    operations: list[CatalogEntry]


@router.get("/v1/catalog", responses={**ok(Catalog), **errors(401, 503)}, response_model=None)
async def catalog(request: Request, tenant: str = Depends(auth.tenant)) -> dict[str, Any]:
    return {
        "operations": [
            {
                "provider": provider,
                "operation": info.name,
                "class": info.side_effect.value,
                "reversibility": info.reversibility.value,
                "compensation": info.compensation,
                "undo": info.compensation,
                "payload_schema": info.payload_schema,
                "amount_field": info.amount_field,
                "undo_payload": dict(info.undo_payload) if info.undo_payload else None,
            }
            for provider, info in catalog_of(request.app.state.settings)
        ]
    }
