"""RECON_OPERATOR_KEYS (docs/contract.md, "v1 additions"): key=tenant:person, checked at start-up,
and an operator key authenticates as its tenant and names its person."""

import pytest

from services.config import ConfigError, Operator, load_settings
from services.intake.auth import Principal, principal_for
from services.intake.errors import ApiError


def test_out_of_the_box_ops_key_is_the_demo_tenants_operator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RECON_OPERATOR_KEYS", raising=False)
    monkeypatch.delenv("RECON_API_KEYS", raising=False)
    settings = load_settings()
    assert settings.operator_keys == {"ops-key": Operator("demo", "operator")}
    assert principal_for("Bearer ops-key", settings.api_keys, settings.operator_keys) == (
        Principal("demo", "operator")
    )
    assert principal_for("Bearer demo-key", settings.api_keys, settings.operator_keys) == (
        Principal("demo")
    )


@pytest.mark.parametrize("value", ["ops=demo", "ops=demo:", "ops=de mo:ann", "demo-key=demo:ann"])
def test_a_malformed_operator_key_stops_the_process(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.delenv("RECON_API_KEYS", raising=False)
    monkeypatch.setenv("RECON_OPERATOR_KEYS", value)
    with pytest.raises(ConfigError, match="RECON_OPERATOR_KEYS"):
        load_settings()


def test_an_unknown_key_is_refused() -> None:
    with pytest.raises(ApiError):
        principal_for("Bearer nope", {"a": "t"}, {"o": Operator("t", "p")})
