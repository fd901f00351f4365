"""The owner token (issue 18, item 5): what proves that a request comes from the session
that owns a transaction. A session id is a name every agent key of the tenant can read
(`GET /v1/operations/{op_key}` shows the owner), so naming it proves nothing; the token is
returned only to the submitter (the 202) and to a claimant (the claim's 200), and an agent's
command on a transaction (abort, release, review, the owner's renewing claim) must carry it.

Derived, not stored: an HMAC of the tenant, the tx_id, the agent and the session under
RECON_OWNER_TOKEN_SECRET, so a retried submission returns the same token, every intake
process checks it alike, and nothing of it is recorded on the log. A token of a session
that lost the transaction stays valid for that session: its command is then fenced by the
decider (recorded, `409 fenced`), not taken for a forgery.
"""

import hashlib
import hmac

from services.intake.errors import ApiError

PREFIX = "ot_"


def owner_token(secret: str, tenant: str, tx_id: str, agent_id: str, session_id: str) -> str:
    # Newline-separated: only the agent id may contain one (the tenant is configured, the
    # tx_id and the session have patterns without), so no two tuples sign one message.
    message = "\n".join(("owner-token-v1", tenant, tx_id, agent_id, session_id)).encode()
    return PREFIX + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def check(
    secret: str, tenant: str, tx_id: str, agent_id: str, session_id: str, presented: str | None
) -> None:
    """Raise `403 owner_token_invalid` unless `presented` is this session's token."""
    expected = owner_token(secret, tenant, tx_id, agent_id, session_id)
    if presented is None or not hmac.compare_digest(expected.encode(), presented.encode()):
        raise ApiError(
            403,
            "owner_token_invalid",
            f"send the owner_token that the submission's 202 (or your claim's 200) returned"
            f" for session {session_id!r} of {agent_id!r}; nothing was recorded",
        )
