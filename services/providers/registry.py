"""Adapters found by name: the `recon.providers` entry point group.

recon's own adapters are declared in its pyproject.toml like anyone else's, so the
built-in ones and a third party's are found the same way, by importlib.metadata; a
provider is added by installing a package that declares an entry point here, with no
change to recon. Each entry point names an adapter class (interface.AdapterClass).

Configuration names the adapter per provider (RECON_PROVIDER_ADAPTERS; `sandbox` when
not named), and services.config refuses a name no installed package declares, so a typo
stops start-up instead of a provider whose every call is `unknown`.
"""

from importlib.metadata import EntryPoint, entry_points

from reconcilers.signatures import Scheme
from services.config import Settings
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
    """One measured adapter per configured provider, each made by the class its
    configuration names; an AdapterSetupError stops start-up."""
    return {
        name: Measured(
            name,
            adapter_class(settings.provider_adapters.get(name, DEFAULT_ADAPTER)).from_setup(
                ProviderSetup(
                    name=name,
                    base_url=url,
                    http=http,
                    secret=settings.provider_secrets.get(name),
                )
            ),
        )
        for name, url in settings.providers.items()
    }
