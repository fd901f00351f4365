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

from collections.abc import Mapping
from functools import cache
from importlib.metadata import EntryPoint, entry_points

from events.catalog import Catalog, OperationInfo
from events.compensation import source_problem
from events.payload_check import schema_problem
from reconcilers.signatures import Scheme
from services.config import Settings
from services.providers.accounts import Account, account_of
from services.providers.declared.adapter import declared_operations
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
    # A declared provider's operations are its file's (services.providers.declared), so its
    # class has none of its own; any other class's are checked here, at start-up.
    operations = getattr(loaded, "operations", None)
    problem = None if operations is None else _operations_problem(operations)
    if problem is not None:
        raise AdapterSetupError(
            f"entry point {name!r} ({declared[name].value}) declares its operations wrongly: "
            f'{problem} (docs/providers.md, "Declaring operations")'
        )
    kind: AdapterClass = loaded
    return kind


def _operations_problem(operations: object) -> str | None:
    """What is wrong with an adapter class's `operations`, None when nothing: a broken
    declaration stops start-up rather than refusing or letting through every payload."""
    if not isinstance(operations, Mapping):
        return "`operations` must map each operation's name to an events.catalog.OperationInfo"
    for name, info in operations.items():
        if not isinstance(info, OperationInfo) or info.name != name:
            return f"{name!r} must map to an OperationInfo named {name!r}"
        if info.compensation is not None and info.compensation not in operations:
            return f"{name!r} declares the undo {info.compensation!r}, which it does not offer"
        for field, source in (info.undo_payload or {}).items():
            problem = source_problem(source)
            if problem is not None:
                return f"{name!r}: its undo_payload field {field!r}: {problem}"
        if info.payload_schema is not None:
            problem = schema_problem(info.payload_schema)
            if problem is not None:
                return f"{name!r}: its payload_schema is not a JSON Schema: {problem}"
    return None


def catalog_of(settings: Settings) -> Catalog:
    """The catalog of the configured providers: each one's operations as its adapter class
    declares them, or a declared provider's as its file does (no adapter is made, nothing
    is asked of a provider). A tenant's own account is of its provider's class, so it
    offers the same operations. AdapterSetupError for a broken declaration."""
    key = tuple(
        (
            name,
            settings.provider_adapters.get(name, DEFAULT_ADAPTER),
            settings.provider_files.get(name),
        )
        for name in sorted(settings.providers)
    )
    return _catalog(key)


@cache
def _catalog(providers: tuple[tuple[str, str, str | None], ...]) -> Catalog:
    # Cached per configuration: reading entry points scans the environment's metadata, and
    # every submission asks.
    declared: dict[str, Mapping[str, OperationInfo]] = {}
    for name, adapter, path in providers:
        operations = (
            declared_operations(path) if path is not None else adapter_class(adapter).operations
        )
        problem = _operations_problem(operations)
        if problem is not None:
            raise AdapterSetupError(f"provider {name!r} declares its operations wrongly: {problem}")
        declared[name] = operations
    return Catalog(declared)


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
        max_list_pages=settings.drift_list_pages.get(name),
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
