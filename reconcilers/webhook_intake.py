"""What a verified provider webhook means for recon: an observation of one of its
operations, or drift (an effect nobody intended, or one whose metadata names another).

Matched on the idempotency key only (issue 18, item 13). `metadata.op_key` is whatever the
caller who created the effect at the provider wrote: anyone with an account at the shared
provider can put a victim's op key there, so it never makes a match. Recon sends the same
key in both places; an effect under one of recon's idempotency keys whose metadata names
another key is a disagreement, reported as `mismatch` drift to the matched operation's
tenant, never an observation.

Pure: the clock reading, the delivery id and the matched operation arrive as arguments.
Only bodies whose signature was already verified reach this module.
"""

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events.drift import DriftDetected, DriftKind, drift_id
from events.inputs import OperationObserved, Outcome, Source
from events.keys import webhook_id
from events.observation import Seen, observation
from events.safe_json import escape_unencodable

EFFECT_SUCCEEDED = "effect.succeeded"


class WebhookBodyError(ValueError):
    """A signed body that is not a webhook recon understands (a 400: nothing changes)."""


@dataclass(frozen=True)
class EffectNotice:
    """The part of a webhook body recon acts on."""

    type: str
    effect: dict[str, Any]
    effect_id: str
    # The keys under which recon may know the effect: the idempotency key it sent (the
    # provider ties the effect to it; nobody but recon knows it before the call).
    keys: tuple[str, ...]
    # The op key the effect's metadata claims: only compared, never matched on.
    claimed_op_key: str | None = None


@dataclass(frozen=True)
class MatchedOperation:
    tenant: str
    tx_id: str
    action: str
    op_key: str  # the leg's key the effect was made under (forward or compensation)
    # The account the leg's calls went to: the tenant's own (its name), or None for the
    # provider's shared one (services.providers.accounts' rule).
    account: str | None = None


def parse_notice(body: bytes) -> EffectNotice:
    try:
        # Escaped at once: a lone surrogate or a NUL would make the observation (or the
        # drift report) fail to encode or to store, on every retry of the delivery.
        event = escape_unencodable(json.loads(body))
    except ValueError:
        raise WebhookBodyError("the body is not JSON") from None
    except RecursionError:
        # A signed body nested thousands deep fits the size cap; it is refused, not a 500.
        raise WebhookBodyError("the body is nested too deeply") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise WebhookBodyError('the body must be a JSON object with a string "type"')
    data = event.get("data")
    effect = data.get("effect") if isinstance(data, dict) else None
    if not isinstance(effect, dict):
        raise WebhookBodyError('the body must carry the effect as "data": {"effect": {...}}')
    effect_id = effect.get("id")
    if not isinstance(effect_id, str) or not effect_id:
        raise WebhookBodyError('data.effect must have a string "id"')
    keys: list[str] = []
    idempotency_key = effect.get("idempotency_key")
    if isinstance(idempotency_key, str) and idempotency_key:
        keys.append(idempotency_key)
    metadata = effect.get("metadata")
    meta_key = metadata.get("op_key") if isinstance(metadata, dict) else None
    return EffectNotice(
        type=event["type"],
        effect=effect,
        effect_id=effect_id,
        keys=tuple(keys),
        claimed_op_key=meta_key if isinstance(meta_key, str) and meta_key else None,
    )


def meaning(
    provider: str,
    account: str | None,
    delivery_id: str,
    notice: EffectNotice,
    op: MatchedOperation | None,
    now: datetime,
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
        return metadata_mismatch(provider, notice, op, now)
    return webhook_observation(provider, delivery_id, notice, op, now)


def webhook_observation(
    provider: str,
    delivery_id: str,
    notice: EffectNotice,
    op: MatchedOperation,
    now: datetime,
) -> OperationObserved:
    """A sighting not tied to any dispatch (attempt 0): it can prove the effect exists and
    nothing else (transactions.transaction). The message id is the delivery's, so a
    redelivery the dedupe table missed is still recognised by the decider."""
    return observation(
        message_id=webhook_id(provider, delivery_id, op.account),
        tenant=op.tenant,
        tx_id=op.tx_id,
        action=op.action,
        op_key=op.op_key,
        attempt=0,
        source=Source.WEBHOOK,
        seen=Seen(Outcome.SUCCEEDED, remote_id=notice.effect_id, body=notice.effect),
        observed_at=now,
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
    provider: str, notice: EffectNotice, op: MatchedOperation, now: datetime
) -> DriftDetected:
    """An effect under `op`'s idempotency key whose metadata names another op key: recon
    never sends that, so something other than recon touched the effect; a person looks."""
    kind = DriftKind.MISMATCH
    return DriftDetected(
        drift_id=drift_id(kind, provider, notice.effect_id),
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
