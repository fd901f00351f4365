"""The dispatcher's answer for a step's call it did not make because the transaction's abort
was recorded first (issue 18, item 17; services/dispatcher/calls_begun.py `begin`).

It is a definitive "not applied": no call of that leg was ever begun, and none will be (the
record of the abort stays, so every later `begin` of the leg is refused too). The decider
reads it as the abort itself, whether or not the AbortTransaction has reached it yet.

Pure: no I/O.
"""

from events.inputs import OperationObserved, Outcome, Source

ABORTED_BEFORE_CALL = "aborted_before_call"


def aborted_before_call(obs: OperationObserved) -> bool:
    """Only the dispatcher's own answer counts: a provider's or a reconciler's refusal that
    happened to carry the same words is an ordinary rejection."""
    return (
        obs.by_dispatcher
        and obs.source is Source.RESPONSE
        and obs.outcome is Outcome.REJECTED
        and obs.error == ABORTED_BEFORE_CALL
    )
