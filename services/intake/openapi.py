"""What the intake's OpenAPI document declares that FastAPI cannot infer from the routes.

Clients generate SDKs from `/openapi.json`, so it must be complete and resolvable:

- every refusal is `ApiError`'s `{"error", "message"}` (`ErrorBody`), not FastAPI's
  `HTTPValidationError`; `errors(...)` declares the codes a route can answer, once per code;
- the routes that take a body read it themselves, after the API key is checked, so FastAPI
  never sees their models; `json_body(...)` declares the body by reference and `install`
  puts the models (and the models they use) under `components/schemas`, where those
  references resolve. Pydantic's own schema points at `#/$defs/...`, which means nothing
  inside an OpenAPI document;
- `ok(...)` declares the shape of a success answer (`response_models`);
- the Bearer scheme of the keyed routes is declared by `auth.tenant` itself.
"""

from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import FastAPI, Path
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from reconcilers.signatures import MAX_DELIVERY_ID, WEBHOOK_ID

REF_TEMPLATE = "#/components/schemas/{model}"

# Path parameters with an example that exists in a fresh `make run` (the README's intent and
# the sandbox provider), so a client, and the fuzz test, can try a route on something real.
TxId = Annotated[str, Path(openapi_examples={"the README's example": {"value": "order-42"}})]
ProviderName = Annotated[str, Path(openapi_examples={"the sandbox provider": {"value": "sandbox"}})]
# The characters services.config allows in a tenant's name.
TENANT_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"
TenantName = Annotated[
    str,
    Path(pattern=TENANT_PATTERN, openapi_examples={"a tenant": {"value": "acme"}}),
]


class ErrorBody(BaseModel):
    """Every refusal: a stable code for programs, a sentence for the person fixing it."""

    error: str = Field(description="stable, machine-readable code, e.g. `not_found`")
    message: str = Field(description="what went wrong and how to fix the request")


class HealthBody(BaseModel):
    status: str = Field(description="`ok`, or `unavailable` with a `reason`")
    reason: str | None = Field(default=None, description="what is not answering")
    checks: dict[str, str] = Field(description="`ok` or the problem, per dependency")


class WebhookEffect(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1, description="the provider's id of the effect")
    idempotency_key: str | None = Field(default=None, description="the key recon sent")
    metadata: dict[str, Any] | None = Field(
        default=None, description="carries the `op_key` recon sent, when it did"
    )


class WebhookData(BaseModel):
    model_config = ConfigDict(extra="allow")

    effect: WebhookEffect


class WebhookNotice(BaseModel):
    """A provider's signed notice (docs/contract.md, "Webhooks"). Documentation only: the route
    verifies the signature over the raw bytes before it parses anything, then the provider's
    adapter reads it (docs/providers.md, "Webhooks")."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(
        description="the event's type: recon's own format acts on `effect.succeeded`, a "
        "provider's adapter on its provider's types (Stripe's `payment_intent.*`, `refund.*`); "
        "the rest is acknowledged as `ignored`"
    )
    data: WebhookData | dict[str, Any] = Field(
        description="recon's own format: the effect as `data.effect`; a provider whose "
        "adapter reads its own events: that event's data (Stripe: `data.object`)"
    )


# What each refusal means on every route that can answer it; a route adds nothing of its
# own, so one table keeps the document consistent.
_MEANING = {
    400: "malformed request (a webhook with missing or stale signature headers, or a body "
    "that is not a provider notice); nothing was recorded",
    401: "missing or unknown API key (for a webhook: the signature does not verify)",
    403: "the API key may not do this",
    404: "not found for this API key's tenant (another tenant's resource looks the same)",
    409: "conflicts with what was already recorded; `error` names the conflict",
    413: "the body is larger than the intake accepts; nothing was recorded",
    422: "invalid request; `message` says what to fix, and nothing was recorded",
    429: "`too_many_commands`: the transaction took its cap of commands from agent sessions;"
    " only its owner's session and operators are heard now, nothing was recorded",
    503: "Postgres or Kafka is unavailable; nothing was accepted, retry the same request",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route for the refusals it can answer."""
    return {code: {"model": ErrorBody, "description": _MEANING[code]} for code in codes}


def ok(model: type[BaseModel], status: int = 200) -> dict[int | str, dict[str, Any]]:
    """The `responses=` entry of a route's success answer (documentation only)."""
    return {status: {"model": model, "description": "success"}}


def json_body(
    model: type[BaseModel], *, required: bool = True, example: Any = None
) -> dict[str, Any]:
    """The `openapi_extra=` of a route that parses `model` from its body itself. The model
    must also be passed to `install`, which registers it under components."""
    media: dict[str, Any] = {"schema": {"$ref": REF_TEMPLATE.format(model=model.__name__)}}
    if example is not None:
        media["example"] = example
    return {"requestBody": {"required": required, "content": {"application/json": media}}}


def install(app: FastAPI, body_models: Sequence[type[BaseModel]]) -> None:
    """Make `app.openapi()` FastAPI's document plus the body models under components."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = generate()  # FastAPI's, which it caches in app.openapi_schema
        _, defs = models_json_schema(
            [(model, "validation") for model in body_models], ref_template=REF_TEMPLATE
        )
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        schemas.update(defs.get("$defs", {}))
        return document

    wrapped: Callable[[], dict[str, Any]] = openapi
    app.openapi = wrapped  # type: ignore[method-assign]


# A signed header's bounds beyond its type (reconcilers.signatures refuses the rest).
HEADER_BOUNDS: dict[str, dict[str, Any]] = {WEBHOOK_ID: {"maxLength": MAX_DELIVERY_ID}}


def _header(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": False,
        "schema": {"type": "string", **HEADER_BOUNDS.get(name, {})},
        "description": description,
    }


# Which headers a provider sends depends on its configured scheme (RECON_WEBHOOK_SCHEMES),
# so none is required by the document; a delivery without its scheme's headers is a 400.
WEBHOOK_EXTRA: dict[str, Any] = {
    **json_body(WebhookNotice),
    "parameters": [
        _header("webhook-id", "Standard Webhooks: the delivery id (deduplicated)"),
        _header("webhook-timestamp", "Standard Webhooks: signed Unix time"),
        _header("webhook-signature", "Standard Webhooks: `v1,<base64 HMAC-SHA256>` list"),
        _header("Stripe-Signature", "for a provider configured `stripe`: `t=...,v1=...`"),
    ],
}
