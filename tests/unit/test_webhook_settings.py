"""The webhook ingress settings: parsed once, refused at start-up when unusable."""

import pytest

from reconcilers.signatures import Scheme
from services.config import ConfigError, load_settings


def test_defaults_accept_the_sandbox_development_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SECRETS", "SCHEMES", "TOLERANCE_S", "DEDUPE_HORIZON_S"):
        monkeypatch.delenv(f"RECON_WEBHOOK_{name}", raising=False)

    settings = load_settings()

    assert settings.webhook_secrets == {"sandbox": ("whsec_c2FuZGJveC1kZXYtc2VjcmV0",)}
    assert settings.webhook_schemes == {"sandbox": Scheme.STANDARD}
    assert (settings.webhook_tolerance_s, settings.webhook_dedupe_horizon_s) == (300, 259200)


def test_a_standard_secret_without_base64_padding_is_accepted_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # OTHER: "b3RoZXItc2VjcmV0LWtleQ==" without its padding, as providers often issue it.
    monkeypatch.setenv("RECON_WEBHOOK_SECRETS", "sandbox=whsec_b3RoZXItc2VjcmV0LWtleQ")
    monkeypatch.delenv("RECON_WEBHOOK_SCHEMES", raising=False)

    assert load_settings().webhook_secrets == {"sandbox": ("whsec_b3RoZXItc2VjcmV0LWtleQ",)}


def test_rotated_secrets_and_a_stripe_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "RECON_WEBHOOK_SECRETS", "sandbox=whsec_bmV3|whsec_b2xk, stripe=whsec_live-secret"
    )
    monkeypatch.setenv("RECON_WEBHOOK_SCHEMES", "stripe=stripe")
    monkeypatch.setenv("RECON_WEBHOOK_DEDUPE_HORIZON_S", "604800")

    settings = load_settings()

    assert settings.webhook_secrets == {
        "sandbox": ("whsec_bmV3", "whsec_b2xk"),
        "stripe": ("whsec_live-secret",),
    }
    assert settings.webhook_schemes == {"stripe": Scheme.STRIPE}
    assert settings.webhook_dedupe_horizon_s == 604800


@pytest.mark.parametrize(
    ("name", "value", "names"),
    [
        ("RECON_WEBHOOK_DEDUPE_HORIZON_S", "3600", "at least 259200"),
        ("RECON_WEBHOOK_DEDUPE_HORIZON_S", "three days", "RECON_WEBHOOK_DEDUPE_HORIZON_S"),
        ("RECON_WEBHOOK_TOLERANCE_S", "0", "RECON_WEBHOOK_TOLERANCE_S"),
        ("RECON_WEBHOOK_SCHEMES", "sandbox=hmac", "RECON_WEBHOOK_SCHEMES"),
        ("RECON_WEBHOOK_SECRETS", "sandbox=whsec_not*base64", "RECON_WEBHOOK_SECRETS"),
    ],
)
def test_an_unusable_value_stops_the_process_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, names: str
) -> None:
    monkeypatch.setenv(name, value)

    with pytest.raises(ConfigError, match=names):
        load_settings()


def test_a_tenants_own_account_has_its_own_webhook_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RECON_API_KEYS", "key-a=acme")
    monkeypatch.setenv("RECON_PROVIDERS", "sandbox=http://127.0.0.1:1")
    monkeypatch.setenv("RECON_PROVIDER_ACCOUNTS", "acme/sandbox=http://127.0.0.1:2")
    monkeypatch.setenv(
        "RECON_WEBHOOK_SECRETS", "sandbox=whsec_c2hhcmVk, acme/sandbox=whsec_YWNtZQ|whsec_b2xk"
    )
    monkeypatch.delenv("RECON_WEBHOOK_SCHEMES", raising=False)

    settings = load_settings()

    # The shared account's secrets never include a tenant's, nor the reverse.
    assert settings.webhook_secrets == {"sandbox": ("whsec_c2hhcmVk",)}
    own = settings.provider_accounts[("acme", "sandbox")]
    assert own.webhook_secrets == ("whsec_YWNtZQ", "whsec_b2xk")
    assert "whsec_YWNtZQ" not in repr(own)


@pytest.mark.parametrize(
    ("secrets", "names"),
    [
        ("globex/sandbox=whsec_YWNtZQ", "no key"),  # a tenant nobody configured
        ("acme/stripe=whsec_YWNtZQ", "not configured"),  # a provider nobody configured
        ("acme/sandbox=whsec_YWNtZQ", "does not configure"),  # an account never declared
        ("acme/sandbox=not-base64!", "unusable"),  # checked against the scheme
    ],
)
def test_an_own_accounts_webhook_secret_that_cannot_work_stops_start_up(
    monkeypatch: pytest.MonkeyPatch, secrets: str, names: str
) -> None:
    monkeypatch.setenv("RECON_API_KEYS", "key-a=acme")
    monkeypatch.setenv("RECON_PROVIDERS", "sandbox=http://127.0.0.1:1")
    # Only the unusable secret's account is declared: the others fail on the name alone.
    declared = "acme/sandbox=http://127.0.0.1:2" if names == "unusable" else ""
    monkeypatch.setenv("RECON_PROVIDER_ACCOUNTS", declared)
    monkeypatch.setenv("RECON_WEBHOOK_SECRETS", f"sandbox=whsec_c2hhcmVk,{secrets}")
    monkeypatch.delenv("RECON_WEBHOOK_SCHEMES", raising=False)

    with pytest.raises(ConfigError, match=names):
        load_settings()
