"""Pure: the facts of operations recorded before the events carried them.

Until the catalog came from the providers, the decider read an operation's class and
reversibility from a table in events.catalog, by name, whatever the provider; events
written then carry no `facts`. Replaying them must decide as the live run did, so they are
read through that table, frozen here as it was (an upcast: it never changes, and no new
event is read through it). A name it does not hold was read as
undeclared then (UNDECLARED), and still is.
"""

from events.catalog import UNDECLARED, OperationFacts, Reversibility, SideEffect

_W, _D = SideEffect.WRITE, SideEffect.DESTRUCTIVE
_R, _C, _I = Reversibility.REVERSIBLE, Reversibility.COMPENSATING_ONLY, Reversibility.IRREVERSIBLE

LEGACY_FACTS: dict[str, OperationFacts] = {
    name: OperationFacts(side_effect=side_effect, reversibility=reversibility)
    for name, side_effect, reversibility in (
        ("payments.charge", _W, _C),
        ("payments.refund", _W, _I),
        ("inventory.reserve", _W, _R),
        ("inventory.release", _W, _R),
        ("email.send", _W, _I),
        ("waitlist.promote", _D, _C),
        ("waitlist.restore", _W, _C),
        ("records.delete", _D, _I),
    )
}


def recorded_facts(facts: OperationFacts | None, operation: str) -> OperationFacts:
    """The facts an event recorded for `operation`, or, on an event from before they were
    recorded, what the decider read for it then."""
    if facts is not None:
        return facts
    return LEGACY_FACTS.get(operation, UNDECLARED)
