"""What a verified provider webhook means for recon: an observation of one of its
operations, or drift (an effect nobody intended, or one whose metadata names another).

Matched on the keys the adapter's reader found (reconcilers.webhook_reading): the
idempotency key first (issue 18, item 13). `metadata.op_key` is whatever the caller who
created the effect at the provider wrote, so a reader offers it as a key only where the
provider lets nobody but the account's own key holders write it (Stripe); otherwise it is
only compared. Recon sends the same key in both places; an effect under one of recon's
idempotency keys whose metadata names another key is a disagreement, reported as
`mismatch` drift to the matched operation's tenant, never an observation.

Pure: the clock reading, the delivery id and the matched operation arrive as arguments.
Only bodies whose signature was already verified reach this module.
"""

from dataclasses import dataclass
from datetime import datetime

from events.drift import DriftDetected, DriftKind, drift_id
from events.inputs import OperationObserved, SignedDelivery, Source
from events.keys import webhook_id
from events.observation import Seen, observation
from reconcilers.webhook_reading import EffectNotice


@dataclass(frozen=True)
class MatchedOperation:
    tenant: str
    tx_id: str
    action: str
    op_key: str  # the leg's key the effect was made under (forward or compensation)
    # The account the leg's calls went to: the tenant's own (its name), or None for the
    # provider's shared one (services.providers.accounts' rule).
    account: str | None = None


def meaning(
    provider: str,
    account: str | None,
    delivery_id: str,
    notice: EffectNotice,
    op: MatchedOperation | None,
    now: datetime,
    delivery: SignedDelivery | None = None,
) -> OperationObserved | DriftDetected:
    """The one judge of a verified effect notice: an observation of the operation its
    idempotency key names, or drift.

    `account` signed the delivery (a tenant's own, or None: the shared one); `op` is the
    operation recon made under the notice's key at `provider`. A signature proves only
    what its account holds: an operation whose calls went to another account (another
    tenant's own, or the shared one while its tenant has its own) is not settled by it,
    and the effect is drift of the signing account."""
    if op is not None and op.account != account:
        op = None
    if op is None:
        return effect_without_intent(provider, account, notice, now)
    if notice.claimed_op_key is not None and notice.claimed_op_key != op.op_key:
        return metadata_mismatch(provider, account, notice, op, now)
    return webhook_observation(provider, delivery_id, notice, op, now, delivery)


def webhook_observation(
    provider: str,
    delivery_id: str,
    notice: EffectNotice,
    op: MatchedOperation,
    now: datetime,
    delivery: SignedDelivery | None = None,
) -> OperationObserved:
    """A sighting not tied to any dispatch (attempt 0): it can prove the effect exists and
    nothing else (transactions.transaction). The message id is the delivery's, so a
    redelivery the dedupe table missed is still recognised by the decider. The outcome is
    the notice's: the decider settles a leg on a webhook's `succeeded` only, and keeps
    any other as evidence."""
    return observation(
        message_id=webhook_id(provider, delivery_id, op.account),
        tenant=op.tenant,
        tx_id=op.tx_id,
        action=op.action,
        op_key=op.op_key,
        attempt=0,
        source=Source.WEBHOOK,
        seen=Seen(notice.outcome, remote_id=notice.effect_id, body=notice.effect),
        observed_at=now,
        delivery=delivery,
    )


def effect_without_intent(
    provider: str, account: str | None, notice: EffectNotice, now: datetime
) -> DriftDetected:
    """In a tenant's own account, that tenant's drift (as the drift scan reports it); in
    the shared one, no tenant's."""
    kind = DriftKind.EFFECT_WITHOUT_INTENT
    return DriftDetected(
        drift_id=drift_id(kind, provider, notice.effect_id, account),
        kind=kind,
        provider=provider,
        tenant=account,
        effect_id=notice.effect_id,
        detail={"effect": notice.effect, "source": "webhook"},
        detected_at=now.isoformat(),
    )


def metadata_mismatch(
    provider: str, account: str | None, notice: EffectNotice, op: MatchedOperation, now: datetime
) -> DriftDetected:
    """An effect under `op`'s idempotency key whose metadata names another op key: recon
    never sends that, so something other than recon touched the effect; a person looks.
    Its id names the signing `account` (the operation's, as `meaning` holds it), as the
    drift scan's mismatch of the same effect does: effect ids are unique only within an
    account, and one effect's mismatch is one drift, whoever reports it."""
    kind = DriftKind.MISMATCH
    return DriftDetected(
        drift_id=drift_id(kind, provider, notice.effect_id, account),
        kind=kind,
        provider=provider,
        tenant=op.tenant,
        tx_id=op.tx_id,
        action=op.action,
        op_key=op.op_key,
        effect_id=notice.effect_id,
        detail={
            "source": "webhook",
            "metadata_op_key": {"recon": op.op_key, "provider": notice.claimed_op_key},
            "effect": notice.effect,
        },
        detected_at=now.isoformat(),
    )
