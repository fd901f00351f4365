"""Bearer API keys. The key names the tenant; a request body never does, so an agent
cannot act for another tenant by writing its name."""

import hmac

from fastapi import Request

from services.intake.errors import ApiError

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


def tenant(request: Request) -> str:
    """FastAPI dependency: the tenant of the request's API key."""
    api_keys: dict[str, str] = request.app.state.settings.api_keys
    return tenant_for(request.headers.get("authorization"), api_keys)
