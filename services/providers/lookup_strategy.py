"""Lookup strategies by what a provider offers (issue 20, item 4; README "Connecting a
provider"): the one place their shared rules are written, for every adapter.

- `query`: the provider is asked what it holds under the key (or the reference the call
  carried): present, absent (proven) or unavailable.
- `replay`: the provider answers a request sent again under the same key with the first
  answer, but only within its key retention. A lookup is a resend of the identical first
  request, allowed only while the first send is inside the retention (`inside_retention`,
  judged from a time no later than that send: it errs towards "pruned"); past it, never
  resend under the key: ask (`query`) if the provider lists, else a person decides.
- `none`: nothing can be asked. A lookup says so (`cannot_be_asked`) and sends nothing;
  the outcome stays unknown until a signed webhook proves it or a person settles it, and
  the pull reconciler sends such a leg to review at once rather than spending lookups.

Pure: no I/O.
"""

from datetime import datetime

from events.inputs import Outcome
from events.observation import Seen
from events.str_enum import StrEnum
from services.providers.interface import Sent


class Strategy(StrEnum):
    QUERY = "query"
    REPLAY = "replay"
    NONE = "none"


# The review reason (and lookup error) of an unknown a provider cannot be asked about.
CANNOT_BE_ASKED = "provider_cannot_be_asked"
# A 409 under the key while the first request runs: the provider knows the key.
IN_FLIGHT = 409


def strategy_of(adapter: object) -> Strategy:
    """An adapter's declared strategy: its `lookup_strategy` attribute, else what its
    older facts imply (a key retention: replay; none: query)."""
    declared = getattr(adapter, "lookup_strategy", None)
    if declared is not None:
        return Strategy(declared)
    return Strategy.REPLAY if getattr(adapter, "key_retention_s", None) else Strategy.QUERY


def inside_retention(sent: Sent | None, retention_s: float | None, now: datetime) -> bool:
    """May the first request be resent under its key now? Only with the request itself
    and while its send is younger than the retention."""
    if sent is None or retention_s is None:
        return False
    return (now - sent.at).total_seconds() < retention_s


def replayed(seen: Seen) -> Seen:
    """What the answer to a resend says as a lookup: the first answer (an effect, a
    refusal, a request in flight); anything that names no object and no request in
    flight (unreachable, a 5xx, a 429, our configuration, a malformed answer) taught
    nothing: unavailable."""
    if seen.outcome is Outcome.UNKNOWN and seen.remote_id is None and seen.status_code != IN_FLIGHT:
        return Seen(Outcome.UNAVAILABLE, seen.status_code, None, seen.body, seen.error, seen.alarm)
    return seen


def cannot_be_asked(why: str) -> Seen:
    """A lookup that sent nothing because nothing may be sent."""
    return Seen(Outcome.UNAVAILABLE, error=f"{CANNOT_BE_ASKED}: {why}")
