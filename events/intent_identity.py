"""Intent identity: one effect per business intent, whatever tx_id the agent minted (issue 22).

A tx_id protects a retry only when the agent reuses it. An agent that crashed or timed out
re-plans, mints a new tx_id and submits the same intent again, and every key-based guard
(recon's op keys included, derived from the tx_id) sees a new transaction. A step may
therefore carry a `natural_key`, the business identity of its effect (an order id, an
invoice number). The first submission of (tenant, operation, natural key) claims it for the
operation's declared window (events.catalog.OperationInfo.natural_key_window_s); while the
claim holds, another tx_id naming it never reaches the provider:

- the same step (operation, provider and payload as sent): `409 duplicate_intent`, naming
  the transaction that holds the key and its outcome; the agent follows that one;
- another payload under the same key: the agent may be correcting itself or may have
  re-synthesised a different request for the same order. Neither recon nor the model can
  tell, so the step is sent to a person: it waits for an approval (awaiting_approval), and
  the key stays with the first transaction;
- a holder whose command Kafka has not acknowledged yet (the intake's `intents` row is not
  `produced`): nothing is known until the pending horizon has passed (services.intake.
  intents), so `409 intent_pending`, retry later; past the horizon, with no transaction
  projected, the holder never landed and the new submission takes the key.

This module is the one judge of that rule: the intake's store (services.intake.
natural_keys) reads the claim and its holder under a row lock and applies the verdict, for
every door (HTTP, the Kafka intents topic, and MCP through the SDK). Pure: ages come from
Postgres's clock as arguments.
"""

from dataclasses import dataclass

from events.canonical import fingerprint
from events.str_enum import StrEnum

# A business id: printable, no spaces, as long as a resource name.
NATURAL_KEY_PATTERN = r"^[A-Za-z0-9._:@/#-]{1,256}$"


def step_fingerprint(provider: str, operation: str, payload: object) -> str:
    """What makes a second submission "the same step": the call recon would send."""
    return fingerprint({"provider": provider, "operation": operation, "payload": payload})


@dataclass(frozen=True)
class Holder:
    """The transaction holding a natural key, as the store read it."""

    tx_id: str
    action: str
    step_fingerprint: str
    # The holder's claim is past its operation's window.
    expired: bool
    # Kafka acknowledged the holder's SubmitTransaction (intents.produced), or the
    # projection shows its transaction: it is a promise.
    landed: bool
    # Seconds since the holder's last produce attempt (intents.attempted_at).
    attempt_age_s: float


class Verdict(StrEnum):
    TAKE = "take"  # nobody holds the key (any longer): this submission claims it
    OWN = "own"  # this tx_id holds it already: a retry of the same intent
    DUPLICATE = "duplicate"  # another tx_id made this very call: refuse, name it
    DIFFERS = "differs"  # another tx_id holds it with another call: a person decides
    PENDING = "pending"  # the holder may or may not have landed: retry later


def judge(holder: Holder | None, tx_id: str, step: str, horizon_s: float) -> Verdict:
    """The verdict for a step of `tx_id` (its fingerprint `step`) over a key's `holder`."""
    if holder is None or holder.expired:
        return Verdict.TAKE
    if holder.tx_id == tx_id:
        return Verdict.OWN
    if not holder.landed:
        # The holder's command may be in Kafka with only its acknowledgement lost; past
        # the horizon (longer than the intake producer's delivery bound) it is in the log
        # or never will be, and the store saw no projected transaction: it never will be.
        return Verdict.PENDING if holder.attempt_age_s <= horizon_s else Verdict.TAKE
    return Verdict.DUPLICATE if holder.step_fingerprint == step else Verdict.DIFFERS
