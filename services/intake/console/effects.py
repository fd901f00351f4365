"""What each console button will do, in words a person reads before pressing it: the
confirmation of a resolution names its effect (docs/webhooks-reviews-drift.md, "Reviews").
"""

from events.definition import Leg, Resolution

_FORWARD = {
    Resolution.APPLIED: "records that the provider made the effect: the step becomes "
    "confirmed and the transaction carries on with its next step",
    Resolution.NOT_APPLIED: "records that the provider never made the effect: the step "
    "fails, the transaction fails and its confirmed steps are compensated in reverse order",
    Resolution.RETRY: "looks the idempotency key up at the provider and sends the call "
    "again under the same key (no second effect if the first one happened)",
}
_UNDO = {
    Resolution.APPLIED: "records that the provider made the undo: the step becomes "
    "compensated and the compensation goes on",
    Resolution.NOT_APPLIED: "records that the undo never happened: it is sent again under "
    "its same key, looked up first",
    Resolution.RETRY: "looks the undo's key up and sends the undo again under the same key",
}


def resolution_effect(leg: str, resolution: Resolution) -> str:
    return (_UNDO if leg == Leg.COMPENSATION.value else _FORWARD)[resolution]


APPROVE_EFFECT = (
    "lets this step run against the preview shown (its digest binds the approval: a changed "
    "payload or resource voids it); recon asks the provider again first"
)
REJECT_EFFECT = "the step never runs; the transaction fails and its confirmed steps are compensated"
ENGAGE_EFFECT = (
    "no new provider call of the scope is made until it is released; held dispatches are "
    "sent after the release, never dropped"
)
RELEASE_EFFECT = "the dispatches it holds are sent within a second"
RESET_EFFECT = "new dispatches of that agent and operation count against the quota again"
