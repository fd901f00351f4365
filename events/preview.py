"""A preview as an approver is shown it (POST /v1/previews), and the digest that binds an
approval to it.

The intake computes the preview from the providers' answers and its digest with
`preview_digest`; an approval carries the steps it was shown and that digest, and the
decider recomputes the digest with the same function before it records the approval
(transactions.approvals). One function, so a preview the intake shows and a preview the
decider accepts cannot be hashed two ways.

The digest is a hash, not a signature: it proves that the recorded approval names exactly
the steps it carries (so the chain shows what was approved, and the pinned revision is the
one shown), not who computed them. Who may write an approval at all is Kafka's ACLs and
the operator key at the intake.

Pure: no I/O.
"""

from collections.abc import Sequence
from typing import Any

from events.canonical import canonical_json, fingerprint
from events.model import Message

# What an approval may carry of its preview, as canonical JSON. A command and the approval
# event each carry it once, far under the decider's record bound (512 KiB,
# services.decider.runtime.MAX_RECORD_BYTES), with room for the rest of the transaction's
# state; a preview of the sandbox's operations is a few hundred bytes a step.
MAX_SHOWN_BYTES = 128 * 1024


class StepPreview(Message):
    """One step as its provider previewed it."""

    action: str
    provider: str
    operation: str
    side_effect: str
    reversibility: str
    approval_required: bool
    resource: str | None
    current_revision: int | None
    effects: dict[str, Any]
    notifications: list[Any]
    # The provider's definitive refusal this step would meet (then no effects), or null.
    refusal: dict[str, Any] | None


def shown_json(steps: Sequence[StepPreview]) -> list[dict[str, Any]]:
    return [step.model_dump(mode="json") for step in steps]


def preview_digest(tx_id: str, proposal_digest: str, steps: Sequence[StepPreview]) -> str:
    """sha256 of the canonical preview: the transaction, its proposal's digest (the
    transaction's fingerprint) and every step as shown."""
    return fingerprint(
        {"tx_id": tx_id, "proposal_digest": proposal_digest, "steps": shown_json(steps)}
    )


def shown_bytes(steps: Sequence[StepPreview]) -> int:
    return len(canonical_json(shown_json(steps)))
