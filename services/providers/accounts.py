"""Which provider account a tenant's calls go to (issue 20, item 7): the one rule.

A provider is configured once with a shared account (RECON_PROVIDERS) and, for any
tenant, optionally with that tenant's own account (RECON_PROVIDER_ACCOUNTS,
docs/providers.md, "Per-tenant accounts"). A tenant's calls, lookups and drift go to its
own account when one is configured, else to the shared one. Every caller asks this rule
with the tenant recon itself knows (the log's envelope, the projected leg, the API key),
never with one a payload names: a payload that could pick the account could read another
tenant's effects.

Pure: no I/O; services.providers.registry holds the adapters per account and the drift
scan (services.pull_reconciler) attributes each account's findings with the same rule.
"""

from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class Account:
    """One account at a provider: a tenant's own, or the shared one (`tenant` None)."""

    provider: str
    tenant: str | None = None

    def __str__(self) -> str:
        return self.provider if self.tenant is None else f"{self.tenant}/{self.provider}"


def account_of(tenant: str, provider: str, own: Collection[tuple[str, str]]) -> Account:
    """The account `tenant`'s calls to `provider` use: its own when (tenant, provider) is
    among the configured accounts `own`, else the shared one."""
    if (tenant, provider) in own:
        return Account(provider, tenant)
    return Account(provider)
