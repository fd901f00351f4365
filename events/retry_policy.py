"""What an operation's side-effect class allows once its outcome is unknown (docs/design.md,
"Retry policy"): the one table the decider and the dispatcher read.

- `read`: no effect to duplicate, so an unknown answer is simply asked again (no lookup),
  within a budget.
- `write`: sent again only under the same key, and only once a lookup proved the key holds
  no effect, within a budget (the provider dedupes a call still travelling).
- `destructive`: never sent again by a machine. An unknown is settled by lookups (the
  effect is found) or by a person in manual review; a lookup that finds nothing proves
  only that the call has not landed *yet*, and a second call is exactly the harm the class
  names (a second displacement, a second delete).

Pure: no I/O, no clock.
"""

from events.catalog import Classified, SideEffect

# How many dispatches of one leg a machine may make in all; past that a person decides.
ATTEMPT_BUDGET = {SideEffect.READ: 5, SideEffect.WRITE: 3, SideEffect.DESTRUCTIVE: 1}


def may_resend(info: Classified, attempt: int) -> bool:
    """Whether a machine may dispatch attempt `attempt + 1` of a leg whose attempt
    `attempt` is unknown and (for a write) proven absent by a lookup."""
    return attempt < ATTEMPT_BUDGET[info.side_effect]


def resend_without_lookup(info: Classified) -> bool:
    """A read has no effect a lookup could find: an unknown answer is asked again at once."""
    return info.side_effect is SideEffect.READ


def looks_up_first(info: Classified, attempt: int) -> bool:
    """Whether a dispatch looks under its key before it applies (OperationDispatched.
    lookup_first): a later attempt does, since an earlier one's call may have landed, but
    never a first (nothing was sent before it) nor a read (no effect for a lookup to find)."""
    return attempt > 1 and not resend_without_lookup(info)


def redelivery_may_apply(info: Classified) -> bool:
    """Whether a dispatcher that finds no effect under the key on a redelivered dispatch
    (a previous owner may have made the call and crashed before reporting) may apply it.
    For a destructive operation it may not: the call may still land, and the provider's
    count of calls, not only of effects, must stay one."""
    return info.side_effect is not SideEffect.DESTRUCTIVE
