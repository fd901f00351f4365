"""Why a provider's definitive refusal failed a step: a refusal of a stale view of the
resource (the call's `expected_revision` was not the resource's) is `stale_revision`, the
agent's cue to re-plan, never a retry with the new revision on its behalf.

Pure: no I/O, no clock."""

from events.inputs import OperationObserved
from services.providers.classify import STALE_REVISION


def rejection_reason(obs: OperationObserved) -> str:
    body = obs.body
    if isinstance(body, dict) and body.get("error") == STALE_REVISION:
        return STALE_REVISION
    return "step_rejected"
