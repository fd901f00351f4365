"""Per-tenant provider accounts (issue 20, item 7): the one rule that picks a tenant's
account, the adapters built for each account, the settings that configure them, and the
drift comparison that attributes what an account lists to that account's tenant."""

from datetime import UTC, datetime, timedelta

import pytest

from events.drift import DriftDetected, DriftKind, drift_id
from events.topics import Topics
from reconcilers.drift import Effect, compare
from services.config import ConfigError, ProviderAccount, Settings, load_settings
from services.providers.accounts import Account, account_of
from services.providers.adapters import SandboxAdapter
from services.providers.http import Answer
from services.providers.measured import Measured
from services.providers.registry import adapter_for, build_accounts
from services.providers.stripe.adapter import StripeAdapter

OWN = {("acme", "sandbox")}


class Silent:
    async def request(self, method: str, url: str, **_: object) -> Answer:
        return Answer(503, b"")


def base_url(adapter: object) -> str:
    assert isinstance(adapter, Measured) and isinstance(adapter.inner, SandboxAdapter)
    return adapter.inner.base_url


# --- the rule ------------------------------------------------------------------------


def test_a_tenant_with_its_own_account_uses_it() -> None:
    assert account_of("acme", "sandbox", OWN) == Account("sandbox", "acme")


def test_a_tenant_without_one_uses_the_shared_account() -> None:
    assert account_of("globex", "sandbox", OWN) == Account("sandbox")


def test_an_own_account_is_per_provider() -> None:
    assert account_of("acme", "pay", OWN) == Account("pay")


# --- the adapters per account ---------------------------------------------------------


SETTINGS = Settings(
    kafka_bootstrap="",
    database_url="",
    topics=Topics(""),
    environment="test",
    providers={"sandbox": "http://shared"},
    provider_accounts={
        ("acme", "sandbox"): ProviderAccount("http://acme"),
        ("globex", "sandbox"): ProviderAccount("http://globex"),
    },
)


def test_each_tenants_calls_go_to_its_own_accounts_base_url() -> None:
    accounts = build_accounts(Silent(), SETTINGS)
    assert base_url(accounts.adapter_for("acme", "sandbox")) == "http://acme"
    assert base_url(accounts.adapter_for("globex", "sandbox")) == "http://globex"
    assert base_url(accounts.adapter_for("demo", "sandbox")) == "http://shared"
    assert accounts.adapter_for("acme", "unconfigured") is None


def test_the_drift_scan_lists_every_account_once() -> None:
    listed = [str(account) for account, _ in build_accounts(Silent(), SETTINGS).listed()]
    assert listed == ["acme/sandbox", "globex/sandbox", "sandbox"]


def test_the_intakes_one_adapter_follows_the_same_rule() -> None:
    assert base_url(adapter_for(Silent(), SETTINGS, "acme", "sandbox")) == "http://acme"
    assert base_url(adapter_for(Silent(), SETTINGS, "demo", "sandbox")) == "http://shared"
    assert adapter_for(Silent(), SETTINGS, "acme", "unconfigured") is None


def test_an_own_account_sends_its_own_credential_never_the_shared_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RECON_API_KEYS", "key-a=acme,key-g=globex")
    monkeypatch.setenv("RECON_PROVIDERS", "pay=http://127.0.0.1:1")
    monkeypatch.setenv("RECON_PROVIDER_ADAPTERS", "pay=stripe")
    monkeypatch.setenv("RECON_PROVIDER_ACCOUNTS", "acme/pay=http://127.0.0.1:2")
    monkeypatch.setenv("RECON_PROVIDER_SECRETS", "pay=sk_test_shared,acme/pay=sk_test_acme")
    settings = load_settings()
    assert settings.provider_secrets == {"pay": "sk_test_shared"}
    assert settings.provider_accounts == {
        ("acme", "pay"): ProviderAccount("http://127.0.0.1:2", "sk_test_acme")
    }
    # The credential is never in a representation that could be logged.
    assert "sk_test_acme" not in repr(settings.provider_accounts)
    accounts = build_accounts(Silent(), settings)
    for tenant, key in (("acme", "sk_test_acme"), ("globex", "sk_test_shared")):
        adapter = accounts.adapter_for(tenant, "pay")
        assert isinstance(adapter, Measured) and isinstance(adapter.inner, StripeAdapter)
        assert adapter.inner.headers["Authorization"] == f"Bearer {key}"


# --- bad settings stop start-up, naming the variable ---------------------------------


@pytest.mark.parametrize(
    ("accounts", "secrets", "message"),
    [
        ("sandbox=http://x", "", r"RECON_PROVIDER_ACCOUNTS: expected tenant/provider"),
        ("/sandbox=http://x", "", r"RECON_PROVIDER_ACCOUNTS: expected tenant/provider"),
        ("acme/sandbox", "", r"RECON_PROVIDER_ACCOUNTS: expected comma-separated"),
        ("initech/sandbox=http://x", "", r"RECON_PROVIDER_ACCOUNTS: tenant 'initech' has no key"),
        ("acme/pay=http://x", "", r"RECON_PROVIDER_ACCOUNTS: provider 'pay' of tenant 'acme'"),
        ("", "acme/sandbox=sk_hidden", r"RECON_PROVIDER_SECRETS: 'acme/sandbox' names an acc"),
        ("acme/sandbox=http://x", "initech/sandbox=sk_hidden", r"tenant 'initech' has no key"),
    ],
)
def test_a_bad_account_setting_stops_start_up(
    monkeypatch: pytest.MonkeyPatch, accounts: str, secrets: str, message: str
) -> None:
    monkeypatch.setenv("RECON_API_KEYS", "key-a=acme")
    monkeypatch.setenv("RECON_PROVIDERS", "sandbox=http://127.0.0.1:1")
    monkeypatch.setenv("RECON_PROVIDER_ACCOUNTS", accounts)
    monkeypatch.setenv("RECON_PROVIDER_SECRETS", secrets)
    with pytest.raises(ConfigError, match=message) as refused:
        load_settings()
    assert "sk_hidden" not in str(refused.value)


def test_an_operators_tenant_may_have_an_account(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_API_KEYS", "")
    monkeypatch.setenv("RECON_OPERATOR_KEYS", "ops=acme:alice")
    monkeypatch.setenv("RECON_PROVIDER_ACCOUNTS", "acme/sandbox=http://127.0.0.1:2")
    assert set(load_settings().provider_accounts) == {("acme", "sandbox")}


# --- the drift comparison per account -------------------------------------------------

NOW = datetime(2025, 1, 2, tzinfo=UTC)


def stray(effect_id: str = "eff_1") -> Effect:
    return Effect(
        id=effect_id,
        operation="payments.charge",
        idempotency_key="not-recons",
        payload={"amount": 500},
        created_at=NOW - timedelta(hours=1),
    )


def scan(account: str | None) -> list[DriftDetected]:
    return compare(
        provider="sandbox",
        account=account,
        effects=[stray()],
        ledger=[],
        known_keys=set(),
        now=NOW,
        window_start=NOW - timedelta(days=1),
        grace=timedelta(seconds=60),
    )


def test_an_effect_without_intent_in_a_tenants_own_account_is_that_tenants_drift() -> None:
    [found] = scan("globex")
    assert found.tenant == "globex"
    [shared] = scan(None)
    assert shared.tenant is None
    # Effect ids are the account's: the same id in two accounts is two drifts.
    assert found.drift_id != shared.drift_id
    assert found.drift_id == drift_id(DriftKind.EFFECT_WITHOUT_INTENT, "sandbox", "eff_1", "globex")
