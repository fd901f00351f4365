"""What the intake's OpenAPI document says that only the deployment knows: its providers'
catalog and how each provider signs its webhooks.

- A step's `provider` and `operation` (and a compensation's `operation`) are enums of the
  configured catalog (services.providers.registry.catalog_of), so the document no longer
  calls valid a provider the intake refuses with `422 unknown_provider`. A provider's
  payload schemas are served by `GET /v1/catalog`; the door checks them.
- Each provider with webhook secrets gets its own route in the document,
  `/v1/webhooks/<provider>` (and `/v1/webhooks/<provider>/accounts/{tenant}` when a tenant
  has its own account there), declaring as required the headers its scheme signs with: the
  generic `/v1/webhooks/{provider}` cannot (providers sign differently), so a client or a
  fuzzer reading it took an unsigned delivery for a valid one. The generic routes stay in
  the document, with `provider` an enum of the providers that can be delivered to.

docs/openapi.json is the default deployment's document (the sandbox alone); a deployment
serves its own at /openapi.json.
"""

import copy
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from events.catalog import Catalog
from reconcilers.signatures import Scheme
from services.config import Settings
from services.intake.openapi import HEADER_BOUNDS
from services.providers.registry import catalog_of

SHARED = "/v1/webhooks/{provider}"
OWN = "/v1/webhooks/{provider}/accounts/{tenant}"

# The headers each scheme signs with (reconcilers.signatures): a delivery without one is 400.
SIGNATURE_HEADERS: dict[Scheme, tuple[tuple[str, str], ...]] = {
    Scheme.STANDARD: (
        ("webhook-id", "Standard Webhooks: the delivery id (deduplicated)"),
        ("webhook-timestamp", "Standard Webhooks: signed Unix time"),
        ("webhook-signature", "Standard Webhooks: `v1,<base64 HMAC-SHA256>` list"),
    ),
    Scheme.STRIPE: (("Stripe-Signature", "Stripe's signature: `t=<unix time>,v1=<hex>`"),),
}


def install(app: FastAPI, settings: Settings) -> None:
    """Make `app.openapi()` the document with this deployment's catalog and webhooks."""
    generate = app.openapi
    done: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        if not done:
            document = generate()
            with_catalog(document, catalog_of(settings))
            with_webhook_routes(document, settings)
            done.append(document)
        return done[0]

    wrapped: Callable[[], dict[str, Any]] = openapi
    app.openapi = wrapped  # type: ignore[method-assign]


def with_catalog(document: dict[str, Any], catalog: Catalog) -> None:
    schemas = document["components"]["schemas"]
    step = schemas["OperationRequest"]["properties"]
    step["provider"]["enum"] = list(catalog.providers())
    step["operation"]["enum"] = list(catalog.names())
    undos = sorted({info.compensation for _, info in catalog if info.compensation})
    schemas["CompensationRequest"]["properties"]["operation"]["enum"] = undos


def with_webhook_routes(document: dict[str, Any], settings: Settings) -> None:
    paths = document["paths"]
    shared, own = paths.get(SHARED), paths.get(OWN)
    delivered = sorted(settings.webhook_secrets)
    with_own = sorted({p for (_, p), a in settings.provider_accounts.items() if a.webhook_secrets})
    for path, template, providers in ((SHARED, shared, delivered), (OWN, own, with_own)):
        if template is None:
            continue
        if not providers:
            # No secrets, no deliveries: an empty enum would admit no request at all (which
            # schema tools refuse as a broken document), so the route is left out.
            del paths[path]
            continue
        for parameter in template["post"]["parameters"]:
            if parameter["name"] == "provider":
                parameter["schema"]["enum"] = providers
    for provider in delivered:
        if shared is not None:
            paths[SHARED.replace("{provider}", provider)] = _route(shared, provider, settings)
    for provider in with_own:
        if own is not None:
            paths[OWN.replace("{provider}", provider)] = _route(own, provider, settings)


def _route(template: dict[str, Any], provider: str, settings: Settings) -> dict[str, Any]:
    """The generic route's operation for one provider: no `provider` parameter, its
    scheme's headers required and no other scheme's."""
    route = copy.deepcopy(template)
    post = route["post"]
    scheme = settings.webhook_schemes.get(provider, Scheme.STANDARD)
    post["operationId"] = f"{post['operationId']}_{provider}"
    post["summary"] = f"{post.get('summary', 'Receive')} ({provider}, signed {scheme.value})"
    named = {name.lower() for headers in SIGNATURE_HEADERS.values() for name, _ in headers}
    post["parameters"] = [
        p
        for p in post["parameters"]
        if p["name"] != "provider" and not (p["in"] == "header" and p["name"].lower() in named)
    ] + [
        {
            "name": name,
            "in": "header",
            "required": True,
            "schema": {"type": "string", "minLength": 1, **HEADER_BOUNDS.get(name, {})},
            "description": description,
        }
        for name, description in SIGNATURE_HEADERS[scheme]
    ]
    return route
