"""Adapters found by name: the `recon.providers` entry point group.

recon's own adapters are declared in its pyproject.toml like anyone else's, so the
built-in ones and a third party's are found the same way, by importlib.metadata; a
provider is added by installing a package that declares an entry point here, with no
change to recon. Each entry point names an adapter class (interface.AdapterClass).

Configuration names the adapter per provider (RECON_PROVIDER_ADAPTERS; `sandbox` when
not named), and services.config refuses a name no installed package declares, so a typo
stops start-up instead of a provider whose every call is `unknown`.

A provider has a shared account and, per tenant, optionally the tenant's own
(RECON_PROVIDER_ACCOUNTS): `build_accounts` makes an adapter for each, of the provider's
one adapter class, and `Accounts.adapter_for` picks by services.providers.accounts' rule.
"""

from importlib.metadata import EntryPoint, entry_points

from reconcilers.signatures import Scheme
from services.config import Settings
from services.providers.accounts import Account, account_of
from services.providers.http import Requester
from services.providers.interface import (
    AdapterClass,
    AdapterSetupError,
    ProviderAdapter,
    ProviderSetup,
)
from services.providers.measured import Measured

ENTRY_POINT_GROUP = "recon.providers"
# The adapter of a provider configuration does not name: every setting written before
# adapters had names keeps meaning what it meant.
DEFAULT_ADAPTER = "sandbox"


def _declared() -> dict[str, EntryPoint]:
    return {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}


def adapter_names() -> frozenset[str]:
    """The names of every installed adapter (nothing is imported)."""
    return frozenset(_declared())


def adapter_class(name: str) -> AdapterClass:
    declared = _declared()
    if name not in declared:
        raise AdapterSetupError(
            f"no provider adapter named {name!r} is installed (entry point group "
            f"{ENTRY_POINT_GROUP!r} has {', '.join(sorted(declared)) or 'none'})"
        )
    loaded = declared[name].load()
    if not callable(getattr(loaded, "from_setup", None)) or not isinstance(
        getattr(loaded, "webhook_scheme", None), Scheme
    ):
        raise AdapterSetupError(
            f"entry point {name!r} ({declared[name].value}) is not an adapter class: it needs "
            "`from_setup` and a `webhook_scheme` (docs/providers.md)"
        )
    kind: AdapterClass = loaded
    return kind


def build_adapters(http: Requester, settings: Settings) -> dict[str, ProviderAdapter]:
    """One measured adapter per configured provider's shared account, each made by the
    class its configuration names; an AdapterSetupError stops start-up."""
    return {name: _made(http, settings, Account(name)) for name in settings.providers}


def _made(http: Requester, settings: Settings, account: Account) -> ProviderAdapter:
    """The measured adapter of one account: the provider's adapter class, given the
    account's base URL and credential (a tenant's own account never gets the shared
    credential)."""
    name = account.provider
    if account.tenant is None:
        url, secret = settings.providers[name], settings.provider_secrets.get(name)
    else:
        own = settings.provider_accounts[(account.tenant, name)]
        url, secret = own.base_url, own.secret
    kind = adapter_class(settings.provider_adapters.get(name, DEFAULT_ADAPTER))
    setup = ProviderSetup(
        name=name,
        base_url=url,
        http=http,
        secret=secret,
        declaration=settings.provider_files.get(name),
    )
    return Measured(name, kind.from_setup(setup))


class Accounts:
    """Every configured account's adapter, picked for a (tenant, provider) by the one rule
    (services.providers.accounts.account_of)."""

    def __init__(self, adapters: dict[Account, ProviderAdapter]) -> None:
        self.adapters = adapters
        self._own = frozenset((a.tenant, a.provider) for a in adapters if a.tenant is not None)

    def account_of(self, tenant: str, provider: str) -> Account:
        return account_of(tenant, provider, self._own)

    def adapter_for(self, tenant: str, provider: str) -> ProviderAdapter | None:
        """The adapter of `tenant`'s account at `provider`; None for a provider not
        configured. `tenant` is the one recon knows (the log, the credential), never a
        payload's."""
        return self.adapters.get(self.account_of(tenant, provider))

    def listed(self) -> list[tuple[Account, ProviderAdapter]]:
        """Every account once, in a stable order (the drift scan lists each separately)."""
        return sorted(self.adapters.items(), key=lambda item: (item[0].provider, str(item[0])))

    def __len__(self) -> int:
        return len(self.adapters)


def build_accounts(http: Requester, settings: Settings) -> Accounts:
    """The adapters of every shared account and of every tenant's own; an
    AdapterSetupError stops start-up."""
    shared = build_adapters(http, settings)
    own = {
        Account(provider, tenant): _made(http, settings, Account(provider, tenant))
        for tenant, provider in settings.provider_accounts
    }
    return Accounts({**{Account(name): a for name, a in shared.items()}, **own})


def adapter_for(
    http: Requester, settings: Settings, tenant: str, provider: str
) -> ProviderAdapter | None:
    """The one adapter of `tenant`'s account at `provider`, made now (the intake's previews
    and approvals, which call a provider once per request); None for a provider not
    configured."""
    if provider not in settings.providers:
        return None
    return _made(http, settings, account_of(tenant, provider, settings.provider_accounts))
