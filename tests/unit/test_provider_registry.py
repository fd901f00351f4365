"""Adapters are found by name through the `recon.providers` entry point group: the
built-in ones from recon's own metadata, a third party's from its package's, and a name
nobody installed stops start-up (issue 20, item 1)."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconcilers.signatures import Scheme
from services.config import ConfigError, load_settings
from services.providers.adapters import SandboxAdapter
from services.providers.http import Answer
from services.providers.interface import AdapterSetupError
from services.providers.measured import Measured
from services.providers.registry import adapter_names, build_adapters
from services.providers.stripe.adapter import StripeAdapter


class Silent:
    async def request(self, method: str, url: str, **_: object) -> Answer:
        return Answer(503, b"")


def test_the_built_in_adapters_are_declared_as_entry_points() -> None:
    assert {"sandbox", "stripe"} <= adapter_names()


def test_a_provider_whose_configuration_names_no_adapter_speaks_the_sandboxs_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RECON_PROVIDERS", "sandbox=http://127.0.0.1:1,other=http://127.0.0.1:2")
    adapters = build_adapters(Silent(), load_settings())
    assert set(adapters) == {"sandbox", "other"}
    for adapter in adapters.values():
        assert isinstance(adapter, Measured) and isinstance(adapter.inner, SandboxAdapter)


def test_the_configuration_chooses_the_adapter_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_PROVIDERS", "pay=http://127.0.0.1:1")
    monkeypatch.setenv("RECON_PROVIDER_ADAPTERS", "pay=stripe")
    monkeypatch.setenv("RECON_PROVIDER_SECRETS", "pay=sk_test_123")
    [adapter] = build_adapters(Silent(), load_settings()).values()
    assert isinstance(adapter, Measured) and isinstance(adapter.inner, StripeAdapter)


def test_an_adapter_no_package_provides_stops_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_PROVIDERS", "pay=http://127.0.0.1:1")
    monkeypatch.setenv("RECON_PROVIDER_ADAPTERS", "pay=strpie")
    with pytest.raises(ConfigError, match=r"adapter 'strpie'.*installed: .*sandbox.*stripe"):
        load_settings()


def test_an_adapter_for_a_provider_not_configured_stops_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RECON_PROVIDER_ADAPTERS", "pay=stripe")
    with pytest.raises(ConfigError, match="provider 'pay', which RECON_PROVIDERS does not"):
        load_settings()


def test_a_malformed_secret_is_refused_without_echoing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_PROVIDER_SECRETS", "sk_live_do_not_print")
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert "sk_live" not in str(refused.value)


def test_the_stripe_adapter_without_its_api_key_stops_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RECON_PROVIDERS", "pay=http://127.0.0.1:1")
    monkeypatch.setenv("RECON_PROVIDER_ADAPTERS", "pay=stripe")
    with pytest.raises(AdapterSetupError, match="RECON_PROVIDER_SECRETS=pay="):
        build_adapters(Silent(), load_settings())


THIRD_PARTY = '''
from services.providers.adapters import SandboxAdapter


class Inventory(SandboxAdapter):
    """A provider recon has never seen, shipped in its own package."""
'''


@pytest.fixture
def third_party(tmp_path: Path) -> Iterator[None]:
    """An installed package (its module and its dist-info) declaring a `recon.providers`
    entry point: what `pip install acme-recon-inventory` leaves on sys.path."""
    (tmp_path / "acme_inventory.py").write_text(THIRD_PARTY)
    info = tmp_path / "acme_inventory-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-inventory\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[recon.providers]\ninventory = acme_inventory:Inventory\n"
    )
    sys.path.insert(0, str(tmp_path))
    yield
    sys.path.remove(str(tmp_path))
    sys.modules.pop("acme_inventory", None)


@pytest.mark.usefixtures("third_party")
def test_a_third_party_adapter_is_found_by_its_entry_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RECON_PROVIDERS", "stock=http://127.0.0.1:1")
    monkeypatch.setenv("RECON_PROVIDER_ADAPTERS", "stock=inventory")
    [adapter] = build_adapters(Silent(), load_settings()).values()
    assert isinstance(adapter, Measured)
    assert type(adapter.inner).__name__ == "Inventory"


def test_a_providers_webhooks_are_verified_with_its_adapters_scheme_unless_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RECON_PROVIDERS", "pay=http://127.0.0.1:1,sandbox=http://127.0.0.1:2")
    monkeypatch.setenv("RECON_PROVIDER_ADAPTERS", "pay=stripe")
    # Stripe's secrets are used verbatim; as a Standard Webhooks secret this one is not
    # base64, so read with the wrong scheme it would stop start-up.
    monkeypatch.setenv("RECON_WEBHOOK_SECRETS", "pay=whsec_abcde")
    monkeypatch.setenv("RECON_WEBHOOK_SCHEMES", "")
    settings = load_settings()
    assert settings.webhook_schemes.get("pay") is Scheme.STRIPE
    assert settings.webhook_schemes.get("sandbox", Scheme.STANDARD) is Scheme.STANDARD

    monkeypatch.setenv("RECON_WEBHOOK_SCHEMES", "pay=standard")
    with pytest.raises(ConfigError, match="unusable for the standard scheme"):
        load_settings()
