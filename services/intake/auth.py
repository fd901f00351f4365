"""Bearer API keys. The key names the tenant; a request body never does, so an agent
cannot act for another tenant by writing its name."""

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.intake.errors import ApiError

# Only declares the Bearer scheme in the OpenAPI document, for every route that depends on
# `tenant`; it refuses nothing (auto_error=False), so `tenant_for` stays the one check and
# every 401 keeps the API's `{"error", "message"}` shape.
_declare_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="apiKey",
    description="an API key from RECON_API_KEYS; the key names the tenant",
)

_UNAUTHORIZED = "send `Authorization: Bearer <api key>` with a key issued for your tenant"


def tenant_for(authorization: str | None, api_keys: dict[str, str]) -> str:
    scheme, _, key = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise ApiError(401, "unauthorized", f"missing API key: {_UNAUTHORIZED}")
    tenant = None
    # Compare against every key in constant time so response timing does not leak
    # how much of a guessed key was right.
    for known, owner in api_keys.items():
        if hmac.compare_digest(known.encode(), key.strip().encode()):
            tenant = owner
    if tenant is None:
        raise ApiError(401, "unauthorized", f"unknown API key: {_UNAUTHORIZED}")
    return tenant


def tenant(
    request: Request,
    _declared: Annotated[HTTPAuthorizationCredentials | None, Depends(_declare_bearer)],
) -> str:
    """FastAPI dependency: the tenant of the request's API key."""
    api_keys: dict[str, str] = request.app.state.settings.api_keys
    return tenant_for(request.headers.get("authorization"), api_keys)
