"""The catalog the tests judge by: the sandbox's operations, declared as any provider's
(services.providers.sandbox_operations), under the provider names the tests configure."""

from events.catalog import Catalog
from services.providers.sandbox_operations import SANDBOX_OPERATIONS

SANDBOX = Catalog({"sandbox": SANDBOX_OPERATIONS})
# Every operation name the sandbox offers.
SANDBOX_NAMES = tuple(SANDBOX_OPERATIONS)


def sandbox_catalog(*providers: str) -> Catalog:
    """The sandbox's operations at each of `providers` (the sandbox adapter by default)."""
    return Catalog({name: SANDBOX_OPERATIONS for name in providers or ("sandbox",)})
