"""RECON_DRIFT_LIST_PAGES: the drift listing's page cap of a built-in adapter's provider,
the "higher cap" remedy for a listing cut scan after scan (docs/webhooks-reviews-drift.md,
"How the scan lists"), which only a provider file had. Refused at start-up for a provider
not configured, one whose provider file holds its cap, an adapter that takes none, and a
cap that is not a whole number from 1 to 100; reaches each account's adapter, and Stripe's
listing stops at it (stripe-mock lists one page, never `has_more`, so it cannot show a cut:
a scripted answer does)."""

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from events.topics import Topics
from services.config import ConfigError, ProviderAccount, Settings, load_settings
from services.providers.adapters import MAX_LIST_PAGES, SandboxAdapter
from services.providers.http import Answer
from services.providers.measured import Measured
from services.providers.registry import Accounts, build_accounts, build_adapters
from services.providers.stripe.adapter import StripeAdapter

ACME = Path(__file__).resolve().parents[2] / "docs" / "examples" / "acme.toml"


class Silent:
    async def request(self, method: str, url: str, **_: object) -> Answer:
        return Answer(503, b"")


def _inner(adapter: object) -> Any:
    assert isinstance(adapter, Measured)
    return adapter.inner


def test_the_cap_reaches_the_adapters_of_the_providers_it_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "RECON_PROVIDERS", "sandbox=http://127.0.0.1:1,pay=http://127.0.0.1:2,other=http://x:3"
    )
    monkeypatch.setenv("RECON_PROVIDER_ADAPTERS", "pay=stripe")
    monkeypatch.setenv("RECON_PROVIDER_SECRETS", "pay=sk_test_123")
    monkeypatch.setenv("RECON_DRIFT_LIST_PAGES", "pay=30, sandbox=2")
    settings = load_settings()
    assert settings.drift_list_pages == {"pay": 30, "sandbox": 2}
    adapters = {name: _inner(a) for name, a in build_adapters(Silent(), settings).items()}
    assert isinstance(adapters["pay"], StripeAdapter)
    assert (adapters["pay"].max_list_pages, adapters["sandbox"].max_list_pages) == (30, 2)
    assert adapters["other"].max_list_pages == MAX_LIST_PAGES  # not named: the adapter's own


def test_a_tenants_own_account_takes_its_providers_cap() -> None:
    settings = Settings(
        kafka_bootstrap="127.0.0.1:9",
        database_url="postgresql://nobody@127.0.0.1:9/none",
        topics=Topics(""),
        environment="test",
        providers={"sandbox": "http://127.0.0.1:1"},
        provider_accounts={("acme", "sandbox"): ProviderAccount("http://127.0.0.1:2")},
        drift_list_pages={"sandbox": 3},
    )
    accounts: Accounts = build_accounts(Silent(), settings)
    assert {str(a): _inner(adapter).max_list_pages for a, adapter in accounts.listed()} == {
        "sandbox": 3,
        "acme/sandbox": 3,
    }


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"RECON_DRIFT_LIST_PAGES": "nobody=3"}, "provider 'nobody', which RECON_PROVIDERS"),
        ({"RECON_DRIFT_LIST_PAGES": "sandbox=0"}, "from 1 to 100, got '0'"),
        ({"RECON_DRIFT_LIST_PAGES": "sandbox=101"}, "from 1 to 100, got '101'"),
        ({"RECON_DRIFT_LIST_PAGES": "sandbox=ten"}, "from 1 to 100, got 'ten'"),
        ({"RECON_DRIFT_LIST_PAGES": "sandbox=\u00b2"}, "from 1 to 100, got '\u00b2'"),
        ({"RECON_DRIFT_LIST_PAGES": "sandbox=" + "9" * 40}, "from 1 to 100"),
        ({"RECON_DRIFT_LIST_PAGES": "sandbox"}, "expected comma-separated name=value"),
        (
            {"RECON_PROVIDER_FILES": f"acme={ACME}", "RECON_DRIFT_LIST_PAGES": "acme=5"},
            r"its `\[listing\] max_pages` there instead",
        ),
    ],
)
def test_a_cap_that_cannot_be_applied_stops_start_up(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], says: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=says):
        load_settings()


class Pages:
    """Stripe's list answers: each page full and `has_more`, for ever (a resource holding
    more than any cap); what was asked, per resource."""

    def __init__(self) -> None:
        self.asked: dict[str, int] = {}

    async def request(self, method: str, url: str, **kw: Any) -> Answer:
        path = urlparse(url).path
        self.asked[path] = self.asked.get(path, 0) + 1
        n = self.asked[path]
        after = (kw.get("params") or {}).get("starting_after")
        assert (after is None) == (n == 1), parse_qs(urlparse(url).query)
        created = 1_800_000_000 - n
        data = [{"id": f"{path[4:7]}_{n}_{i}", "created": created} for i in range(100)]
        return Answer(200, json.dumps({"data": data, "has_more": True}).encode())


async def test_stripes_listing_stops_at_its_cap_per_resource() -> None:
    for cap in (None, 3):
        pages = Pages()
        adapter = StripeAdapter(pages, "http://stripe", "sk_test_123", max_list_pages=cap)
        listing = await adapter.list_effects()
        expected = cap or StripeAdapter.max_list_pages
        assert pages.asked == {"/v1/payment_intents": expected, "/v1/refunds": expected}
        assert len(listing.effects) == 2 * 100 * expected
        assert listing.covered_from is not None  # cut: more followed


def test_the_sandbox_adapter_keeps_its_own_cap_unless_given_one() -> None:
    assert SandboxAdapter(Silent(), "http://x").max_list_pages == MAX_LIST_PAGES
    assert SandboxAdapter(Silent(), "http://x", 7).max_list_pages == 7
