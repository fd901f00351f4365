"""given/when/then for the owner token (services.intake.owner_token, issue 18 item 5): it
is bound to the tenant, the transaction, the agent and the session, and only the exact
token passes."""

import pytest

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
