"""Which provider resources a tenant may name in a payload (issue 18, item 6).

In a shared provider account a charge id, a record or a waitlist named in a payload is
the provider's, and the provider cannot tell one of recon's tenants from another (a
tenant's own account, services.providers.accounts, adds the provider's own refusal of
what the account does not hold; this check stays, the same for both). So a tenant
may refund, delete or promote only what its own confirmed operations created (the
operation's `remote_id`), or what its own provider account holds (RECON_TENANT_RESOURCES,
`tenant=pattern|pattern`, shell-style patterns). Anything else is refused before anything
is recorded (`403 resource_not_owned`).

Pure: no I/O; the intake asks Postgres what the tenant's operations created
(services.intake.resource_owners).
"""

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

# Payload fields that name a resource the provider already holds, per operation. An
# operation absent here names none (a charge, a reservation, an email create theirs).
RESOURCE_FIELDS: dict[str, str] = {
    "payments.refund": "charge",
    "records.delete": "resource",
    "waitlist.promote": "resource",
    "waitlist.restore": "resource",
}


@dataclass(frozen=True)
class NamedResource:
    action: str
    operation: str
    field: str
    value: str


class ResourceNotOwned(Exception):
    """A payload names a provider resource its tenant has no claim to."""

    code = "resource_not_owned"

    def __init__(self, named: NamedResource) -> None:
        self.named = named
        super().__init__(
            f"action {named.action!r}: {named.operation} names {named.field} "
            f"{named.value[:80]!r}, which no confirmed operation of this tenant created and "
            "this tenant's provider account does not hold; name a resource of your own"
        )


def named_resource(action: str, operation: str, payload: dict[str, Any]) -> NamedResource | None:
    """The resource this step's payload names, if its operation acts on one. A value that
    is not a string names nothing recon could check, so it is named as its text and
    refused unless owned (it can never be)."""
    field = RESOURCE_FIELDS.get(operation)
    if field is None or field not in payload:
        return None
    value = payload[field]
    return NamedResource(action, operation, field, value if isinstance(value, str) else repr(value))


def held_by_account(value: str, patterns: tuple[str, ...]) -> bool:
    """Whether the tenant's provider account holds `value` (RECON_TENANT_RESOURCES)."""
    return any(fnmatchcase(value, pattern) for pattern in patterns)
