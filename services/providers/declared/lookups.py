"""The `query` strategy of a provider file: the request that asks what the provider holds
under a key, and how its answer is read (where the matching effects are, what absence
looks like). Pure: no I/O."""

from typing import Any

from events.inputs import Outcome
from events.observation import Seen
from services.providers.classify import TIMING_4XX, lookup_misdirected
from services.providers.declared import fields
from services.providers.declared.answers import status_matches
from services.providers.declared.model import Query
from services.providers.declared.requests import fill, source


def request(query: Query, op_key: str) -> tuple[str, str, dict[str, str]]:
    """(method, path, query parameters) of the lookup of `op_key`."""
    params = {}
    for name, what in query.params.items():
        value = source(what, {}, op_key)
        if value is not fields.MISSING:
            params[name] = str(value)
    return query.method, fill(query.path, {}, op_key), params


def read(query: Query, op_key: str, status: int, body: Any) -> Seen:
    if status_matches(query.absent_status, status):
        return Seen(Outcome.ABSENT, status, None, body)
    if 400 <= status < 500 and status not in TIMING_4XX:
        return lookup_misdirected(status, body, "a lookup the provider file declares")
    if status != 200:
        return Seen(Outcome.UNAVAILABLE, status, None, body)
    items = fields.get(body, query.items)
    if not isinstance(items, list):
        return Seen(Outcome.UNAVAILABLE, status, None, body, error=f"no list at {query.items}")
    effects = [item for item in items if isinstance(item, dict)]
    if query.key is not None:
        effects = [item for item in effects if fields.get(item, query.key) == op_key]
    done = [
        item
        for item in effects
        if query.state is None or fields.get(item, query.state) in query.done
    ]
    for item in done:
        found = fields.get(item, query.id)
        if found is not fields.MISSING and found is not None and not isinstance(found, dict | list):
            return Seen(Outcome.SUCCEEDED, status, str(found), body)
    if effects:
        return Seen(Outcome.UNKNOWN, status, None, body)  # known to the provider, not done
    return Seen(Outcome.ABSENT, status, None, body)
