"""Parsed JSON from outside (a provider's answer, a webhook body) made safe to record.

`json.loads` accepts `"\\ud800"` (a lone UTF-16 surrogate) and returns a `str` that UTF-8
cannot encode, so the first attempt to write it to Kafka or Postgres raises, and a consumer
that re-reads the record raises again: one odd provider answer becomes a crash loop. Bad
data from outside is evidence to keep, so such strings are kept escaped (`"\\\\ud800"`, the
six characters a person reads in the original body), never dropped and never fatal.
"""

from typing import Any


def encodable(value: Any) -> Any:
    """`value` (as `json.loads` returns it) with every string, keys included, that UTF-8
    cannot encode replaced by its backslash-escaped form; anything else unchanged."""
    if isinstance(value, str):
        return escape_unencodable(value)
    if isinstance(value, dict):
        return {escape_unencodable(str(k)): encodable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [encodable(item) for item in value]
    return value


def escape_unencodable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
