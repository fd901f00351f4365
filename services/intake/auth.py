"""Bearer API keys. The key names the tenant; a request body never does, so an agent
cannot act for another tenant by writing its name.

Two kinds of key (docs/contract.md, "v1 additions"): agent keys (RECON_API_KEYS, key=tenant)
and operator keys (RECON_OPERATOR_KEYS, key=tenant:person). An operator key authenticates
as its tenant too, and also names the person; it never sees another tenant's own data.

A third kind, deployment admin keys (RECON_ADMIN_KEYS, key=person), belongs to no tenant:
it is accepted only where `viewer` is the dependency (`GET /v1/drift`, for the drift that
belongs to no tenant, in full) and is an unknown key (`401`) everywhere else.
"""

import hashlib
import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.config import Operator
from services.intake.errors import ApiError

# Only declares the Bearer scheme in the OpenAPI document, for every route that depends on
# `tenant`; it refuses nothing (auto_error=False), so `tenant_for` stays the one check and
# every 401 keeps the API's `{"error", "message"}` shape.
_declare_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="apiKey",
    description="an API key from RECON_API_KEYS; the key names the tenant",
)

# A configured key written `sha256:<hex digest>` is matched by the digest of the key
# presented: the deployment's configuration (and whoever reads it) never holds the key itself.
HASHED = "sha256:"


def key_matches(known: str, presented: bytes) -> bool:
    """One comparison, in constant time, of a presented key with a configured one (plain or
    `sha256:`-hashed)."""
    if known.startswith(HASHED):
        digest = hashlib.sha256(presented).hexdigest().encode()
        return hmac.compare_digest(known[len(HASHED) :].lower().encode(), digest)
    return hmac.compare_digest(known.encode(), presented)


_UNAUTHORIZED = "send `Authorization: Bearer <api key>` with a key issued for your tenant"


@dataclass(frozen=True)
class Principal:
    tenant: str
    operator: str | None = None  # the person, when the key is an operator key
    # The agents an agent key speaks for (RECON_API_KEYS "key=tenant:a|b"); None: any agent
    # of its tenant (a key naming none, or an operator key, whose person is recorded).
    agents: frozenset[str] | None = None

    @property
    def name(self) -> str:
        """Who submitted, as recorded with the intent and judged for separation of duties:
        the operator's person for an operator key, else the agent key's own agent(s)."""
        if self.operator is not None:
            return f"operator:{self.operator}"
        return "agent:" + "|".join(sorted(self.agents)) if self.agents else "agent-key"

    def speak_for(self, agent_id: str | None) -> None:
        """Refuse an `agent_id` the key does not speak for (403 `agent_not_bound`): grants,
        quotas and ownership key on the agent, so the agent comes from the credential."""
        if agent_id is None or self.agents is None or agent_id in self.agents:
            return
        raise ApiError(
            403,
            "agent_not_bound",
            f"this API key speaks for {', '.join(sorted(self.agents))}, not {agent_id!r}: "
            "use that agent's own key",
        )

    @property
    def is_operator(self) -> bool:
        return self.operator is not None


def principal_for(
    authorization: str | None,
    api_keys: dict[str, str],
    operator_keys: dict[str, Operator] | None = None,
    key_agents: dict[str, frozenset[str]] | None = None,
) -> Principal:
    scheme, _, key = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise ApiError(401, "unauthorized", f"missing API key: {_UNAUTHORIZED}")
    presented = key.strip().encode()
    found = None
    # Compare against every key in constant time so response timing does not leak
    # how much of a guessed key was right, nor which kind of key it was.
    for known, owner in api_keys.items():
        if key_matches(known, presented):
            found = Principal(owner, agents=(key_agents or {}).get(known))
    for known, operator in (operator_keys or {}).items():
        if key_matches(known, presented):
            found = Principal(operator.tenant, operator.person)
    if found is None:
        raise ApiError(401, "unauthorized", f"unknown API key: {_UNAUTHORIZED}")
    return found


@dataclass(frozen=True)
class Admin:
    """A deployment admin key's person: sees what belongs to no tenant, nothing of any
    tenant's own."""

    person: str


def viewer_for(
    authorization: str | None,
    api_keys: dict[str, str],
    operator_keys: dict[str, Operator] | None,
    admin_keys: dict[str, str],
) -> Principal | Admin:
    scheme, _, key = (authorization or "").partition(" ")
    presented = key.strip().encode()
    admin = None
    # Every admin key compared, in constant time, as principal_for does for the others.
    for known, person in admin_keys.items():
        if scheme.lower() == "bearer" and key_matches(known, presented):
            admin = Admin(person)
    if admin is not None:
        return admin
    return principal_for(authorization, api_keys, operator_keys)


def tenant_for(
    authorization: str | None,
    api_keys: dict[str, str],
    operator_keys: dict[str, Operator] | None = None,
) -> str:
    return principal_for(authorization, api_keys, operator_keys).tenant


# Both dependencies are coroutines: FastAPI runs a plain `def` dependency in a worker
# thread, two thread hand-offs per authenticated request for a dictionary lookup.
async def principal(
    request: Request,
    _declared: Annotated[HTTPAuthorizationCredentials | None, Depends(_declare_bearer)],
) -> Principal:
    """FastAPI dependency: who the request's API key names."""
    settings = request.app.state.settings
    return principal_for(
        request.headers.get("authorization"),
        settings.api_keys,
        settings.operator_keys,
        settings.key_agents,
    )


async def viewer(
    request: Request,
    _declared: Annotated[HTTPAuthorizationCredentials | None, Depends(_declare_bearer)],
) -> Principal | Admin:
    """FastAPI dependency for the views a deployment admin key may read too."""
    settings = request.app.state.settings
    return viewer_for(
        request.headers.get("authorization"),
        settings.api_keys,
        settings.operator_keys,
        settings.admin_keys,
    )


async def tenant(who: Annotated[Principal, Depends(principal)]) -> str:
    """FastAPI dependency: the tenant of the request's API key (agent or operator)."""
    return who.tenant
