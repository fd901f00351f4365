"""Stable idempotency keys.

The key a provider sees for an operation is derived only from the intent's
coordinates, never from randomness or time, so every retry, every replacement
dispatcher and every replay sends the same key (promise 1). The derivation is frozen
by a test vector: changing it would make in-flight operations look new to providers.
Bump KEY_VERSION instead, and only for new transactions.
"""

from events.canonical import canonical_json, sha256_hex

KEY_VERSION = 1


def op_key(
    *,
    tenant: str,
    environment: str,
    provider: str,
    tx_id: str,
    action: str,
    version: int = KEY_VERSION,
) -> str:
    material = canonical_json(["recon.op", version, tenant, environment, provider, tx_id, action])
    return f"rk{version}_{sha256_hex(material)[:40]}"


def compensation_key(original_op_key: str, version: int = KEY_VERSION) -> str:
    """The key of the undo of an operation: derived from the original key alone, so
    the compensation is as stable as the effect it reverses."""
    material = canonical_json(["recon.compensation", version, original_op_key])
    return f"rc{version}_{sha256_hex(material)[:40]}"


def partition_key(tenant: str, tx_id: str) -> bytes:
    """Every record of one transaction goes to one partition of every topic.

    tx_id is unique per tenant only, so the tenant is part of the key; "/" cannot occur
    in either (see events.definition)."""
    return f"{tenant}/{tx_id}".encode()


def review_id(tenant: str, tx_id: str, action: str, leg: str, attempt: int) -> str:
    """One review per operation leg and attempt: a repeated request finds the same one."""
    material = canonical_json(["recon.review", tenant, tx_id, action, leg, attempt])
    return f"rv_{sha256_hex(material)[:24]}"


# --- message ids ----------------------------------------------------------------------
# Every input the decider judges carries a deterministic id, and the decider deduplicates
# on it (`seen`): a retried request, a redelivered record or a replayed reaction must yield
# the very same id, whatever the clock said. These ids are stored in the log (as the
# envelopes' causation ids), so their derivation is frozen by test vectors like the keys'.


def submit_id(tenant: str, tx_id: str, fingerprint: str) -> str:
    """Every resubmission of the same intent is recognisably the same command."""
    return f"submit:{tenant}:{tx_id}:{fingerprint[:16]}"


def abort_id(tenant: str, tx_id: str) -> str:
    """An abort is a one-way switch: a second abort, whoever asks, is the same command."""
    return f"abort:{tenant}:{tx_id}"


def resolve_id(review: str) -> str:
    """One resolution per review: a client's retry produces the same command."""
    return f"resolve:{review}"


def plan_id(tenant: str, tx_id: str) -> str:
    """The saga plans a transaction's compensation once."""
    return f"saga:plan:{tenant}:{tx_id}"


def compensate_id(tenant: str, tx_id: str, action: str) -> str:
    """The saga asks for each operation's undo once."""
    return f"saga:compensate:{tenant}:{tx_id}:{action}"


def dispatch_observation_id(
    op_key: str, attempt: int, source: str, outcome: str, lookups: int
) -> str:
    """What a dispatcher saw of one call: same call, same sighting, same id, so a redone
    call's duplicate is recognised."""
    return f"{op_key}:{attempt}:{source}:{outcome}:{lookups}"


def lookup_observation_id(op_key: str, attempt: int, n: int) -> str:
    """Lookup n of one dispatch is one observation, whoever reports it and how often."""
    return f"reconcile:{op_key}:{attempt}:{n}"


def review_request_id(op_key: str, attempt: int) -> str:
    """The reconciler asks for a review of one dispatch once."""
    return f"reconcile:{op_key}:{attempt}:review"


def gate_review_id(op_key: str, attempt: int, reason: str) -> str:
    """The dispatcher's gate asks for a review of one dispatch once per reason (a grant
    withdrawn, a quota exceeded, a precondition that no longer holds): a re-delivered
    dispatch asks again with the same id, and the decider ignores a leg already in review."""
    return f"governance:{op_key}:{attempt}:{reason}"


def webhook_id(provider: str, delivery_id: str, account: str | None = None) -> str:
    """The delivery's own id, so a redelivery the dedupe table missed is still recognised.
    `account`: the tenant whose own provider account sent it (delivery ids are unique only
    within an account); None for the shared account, whose ids predate accounts."""
    scope = provider if account is None else f"{account}/{provider}"
    return f"webhook:{scope}:{delivery_id}"


def event_id(tenant: str, tx_id: str, seq: int) -> str:
    """Derived, not random: the same decision replayed yields the same id."""
    return "ev_" + sha256_hex(canonical_json(["recon.event", tenant, tx_id, seq]))[:32]


def drift_id(kind: str, provider: str, subject: str, account: str | None = None) -> str:
    """`subject` is the provider's effect id, or the op key when there is no effect; `kind`
    a DriftKind value. `account`: the tenant whose own provider account the drift was
    found in (services.providers.accounts), None for the shared account: effect ids are
    only unique within one account, so two accounts' findings must not share an id. The
    shared account's ids are those derived before accounts existed."""
    material = ["recon.drift", str(kind), provider, subject]
    if account is not None:
        material.append(account)
    return "dr_" + sha256_hex(canonical_json(material))[:24]


def session_abort_id(tenant: str, tx_id: str, session_id: str) -> str:
    """An agent session's abort: one per session, so a fenced session's abort (recorded as
    refused) does not swallow its successor's as a duplicate."""
    return f"abort:{tenant}:{tx_id}:{session_id}"


def claim_id(tenant: str, tx_id: str, session_id: str, issued_at: str) -> str:
    """A claim, or the owner's renewal of its lease: each request is its own command (a
    renewal later than the first must not be taken for a duplicate of it)."""
    return f"claim:{tenant}:{tx_id}:{session_id}:{issued_at}"


def release_id(tenant: str, tx_id: str, session_id: str) -> str:
    return f"release:{tenant}:{tx_id}:{session_id}"


def default_session(agent_id: str) -> str:
    """The session of a submission that names none: one per agent, so a client from before
    sessions keeps working and owns what it submits."""
    return f"{agent_id}:default"


def agent_review_id(op_key: str, attempt: int, session_id: str) -> str:
    """An agent session's request for review of one attempt: a retried request is the same
    command; the predecessor's fenced one does not swallow the successor's."""
    return f"agent-review:{op_key}:{attempt}:{session_id}"


def approval_id(tenant: str, tx_id: str, action: str, digest: str, issued_at: str) -> str:
    """One per request, by its time: an approval given again after an earlier one expired is
    a new approval, not a repeat of the spent one (the step's one dispatch spends both)."""
    return "ap_" + sha256_hex(canonical_json([tenant, tx_id, action, digest, issued_at]))[:32]


def rejection_id(tx_id: str, action: str) -> str:
    """A person's refusal of a step: one per step, so a retried request is the same command."""
    return f"reject-{tx_id}-{action}"


def stale_rejection_id(tenant: str, tx_id: str, action: str, approver: str, issued_at: str) -> str:
    """The intake's refusal of a step whose resource moved on since its preview: one per
    request, since a stale answer may come again (an earlier one reached a step not yet
    waiting, and was ignored) and the decider drops a repeated id."""
    return "stale-" + sha256_hex(canonical_json([tenant, tx_id, action, approver, issued_at]))[:32]
