"""given/when/then for the owner token (services.intake.owner_token, issue 18 item 5): it
is bound to the tenant, the transaction, the agent and the session, and only the exact
token passes."""

import pytest

from services.config import DEFAULTS, ConfigError, load_settings
from services.intake.errors import ApiError
from services.intake.owner_token import check, owner_token

SECRET = "s3cret"
ARGS = ("demo", "tx-1", "agent-A", "s-A")


def test_the_token_is_stable_and_bound_to_every_coordinate() -> None:
    token = owner_token(SECRET, *ARGS)
    assert token == owner_token(SECRET, *ARGS)  # a retried submission returns the same
    others = {
        owner_token(SECRET, "other", "tx-1", "agent-A", "s-A"),
        owner_token(SECRET, "demo", "tx-2", "agent-A", "s-A"),
        owner_token(SECRET, "demo", "tx-1", "agent-B", "s-A"),
        owner_token(SECRET, "demo", "tx-1", "agent-A", "s-B"),
        owner_token("another secret", *ARGS),
    }
    assert token not in others and len(others) == 5


def test_only_the_sessions_own_token_passes() -> None:
    check(SECRET, *ARGS, owner_token(SECRET, *ARGS))
    for presented in (None, "", owner_token(SECRET, "demo", "tx-1", "agent-A", "s-B")):
        with pytest.raises(ApiError) as refused:
            check(SECRET, *ARGS, presented)
        assert (refused.value.status, refused.value.code) == (403, "owner_token_invalid")


@pytest.mark.parametrize(
    ("secret", "refused"),
    [(None, "development secret is public"), ("short", "at least 16 characters")],
)
def test_outside_development_the_public_or_a_short_secret_stops_the_process(
    monkeypatch: pytest.MonkeyPatch, secret: str | None, refused: str
) -> None:
    monkeypatch.setenv("RECON_ENVIRONMENT", "prod")
    if secret is None:
        monkeypatch.delenv("RECON_OWNER_TOKEN_SECRET", raising=False)
    else:
        monkeypatch.setenv("RECON_OWNER_TOKEN_SECRET", secret)
    with pytest.raises(ConfigError, match=refused):
        load_settings()


def test_a_deployment_secret_is_taken_and_development_keeps_its_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RECON_OWNER_TOKEN_SECRET", raising=False)
    assert load_settings().owner_token_secret == DEFAULTS["RECON_OWNER_TOKEN_SECRET"]
    monkeypatch.setenv("RECON_ENVIRONMENT", "prod")
    monkeypatch.setenv("RECON_OWNER_TOKEN_SECRET", "a-deployment-secret-of-32-chars!")
    assert load_settings().owner_token_secret == "a-deployment-secret-of-32-chars!"
