"""`GET /v1/catalog` (docs/contract.md, "v1 additions"): every configured provider's operations,
with the side-effect class and reversibility the retry policy, the approval gate and the
previews read from events.catalog, so an agent can tell before it submits what will need
an approval and what cannot be undone. Any key of the tenant may read it."""

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from events.catalog import CATALOG, PROVIDER_CATALOGS, Reversibility, SideEffect
from services.config import Settings
from services.intake import auth
from services.intake.openapi import errors, ok

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


class Catalog(BaseModel):
    operations: list[CatalogEntry]


@router.get("/v1/catalog", responses={**ok(Catalog), **errors(401, 503)}, response_model=None)
async def catalog(request: Request, tenant: str = Depends(auth.tenant)) -> dict[str, Any]:
    settings: Settings = request.app.state.settings
    return {
        "operations": [
            {
                "provider": provider,
                "operation": info.name,
                "class": info.side_effect.value,
                "reversibility": info.reversibility.value,
                "compensation": info.compensation,
                "undo": info.compensation,
            }
            for provider in sorted(settings.providers)
            for info in PROVIDER_CATALOGS.get(provider, CATALOG).values()
        ]
    }
