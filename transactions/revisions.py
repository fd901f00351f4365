"""The resource revisions a step's call is bound to, and why a provider's refusal of one
failed the step.

A gated step is approved against the state a person was shown: the preview's
`current_revision` of the resource it changes, which the approval carries. When the agent
named no `expected_revision` of its own, recon adds that one to the call, so a resource
that moved on between the approval and the call is refused by the provider as
`stale_revision` (the step ends failed, as for a revision the agent sent) instead of the
approved change being applied to a state nobody approved. A step that names its own keeps
it: the agent's plan is the stricter and the older claim.

The pin is chosen once, for the first attempt, and every later attempt under the same key
carries the same one (a resend, a review `retry` on a fresh approval): a key must always
come with one payload, or a provider that binds keys to payloads (the sandbox, Stripe)
answers a reused key, and a first attempt that did apply would not be recognised.

A refusal of a stale view of the resource (the call's `expected_revision` was not the
resource's) is `stale_revision`, the agent's cue to re-plan, never a retry with the new
revision on its behalf.

Pure: no I/O, no clock."""

from typing import Any

from events.approval_ledger import Approval
from events.definition import STALE_REVISION
from events.inputs import OperationObserved

EXPECTED_REVISION = "expected_revision"


def pin_for(payload: dict[str, Any], approval: Approval | None) -> int | None:
    """The revision to add to the first attempt of a step whose agent sent `payload`,
    dispatched on `approval` (None: not gated, or nothing to pin)."""
    if EXPECTED_REVISION in payload or approval is None:
        return None
    return approval.revision


def pinned_payload(payload: dict[str, Any], pin: int | None) -> dict[str, Any]:
    """What the call sends: the agent's payload, with the pinned revision if there is one."""
    if pin is None:
        return payload
    return {**payload, EXPECTED_REVISION: pin}


def rejection_reason(obs: OperationObserved) -> str:
    body = obs.body
    if isinstance(body, dict) and body.get("error") == STALE_REVISION:
        return STALE_REVISION
    return "step_rejected"
