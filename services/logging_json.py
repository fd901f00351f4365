"""Log lines as one JSON object each, carrying the ids that find an operation.

Every recon process logs through this formatter (lifecycle.run_process, unless
`RECON_LOG_FORMAT=text`). A line carries `tx_id`, `op_key` and `attempt` wherever the code
that wrote it knew them, bound once per unit of work (a decided input, a provider call, an
HTTP request) with `log_context`, not passed to every log call, plus `trace_id` when a
trace is being propagated (services.tracing binds it with each span). So
`grep '"op_key": "rk1_..."'` over every process's log finds one operation's whole story.

Cost per record: one dict merge and one json.dumps of a dozen short fields; no clock read
beyond the one logging already made (record.created).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar
from types import MappingProxyType

# Per asyncio task (a task copies the context it was created in), so concurrent provider
# calls in one dispatcher each log their own op_key.
# Never mutated in place (every change sets a new dict), so one empty default is safe.
_ids: ContextVar[Mapping[str, object]] = ContextVar("recon_log_ids", default=MappingProxyType({}))


def log_context(**ids: object) -> AbstractContextManager[None]:
    """Bind these ids (None values are left out) to every line logged inside the block."""
    return _Bound(ids)


class _Bound:
    """log_context's block. A class, not `@contextmanager`: its generator cost ~3 us more per
    block, and the intake opens one per request, the decider one per input (issue 24)."""

    __slots__ = ("_ids", "_token")

    def __init__(self, ids: dict[str, object]) -> None:
        self._ids = ids

    def __enter__(self) -> None:
        current = _ids.get()
        # With no ids the block binds nothing new, but still scopes what `bind` adds inside
        # it; the dict is never mutated in place, so the same one can be set again.
        bound = {k: v for k, v in self._ids.items() if v is not None} if self._ids else None
        self._token = _ids.set({**current, **bound} if bound else current)

    def __exit__(self, *exc: object) -> None:
        _ids.reset(self._token)


def bind(**ids: object) -> None:
    """Add ids to the current context until the enclosing `log_context` ends (ids learnt
    midway, e.g. the tx_id once a record is parsed)."""
    _ids.set({**_ids.get(), **{k: v for k, v in ids.items() if v is not None}})


def current_ids() -> Mapping[str, object]:
    return _ids.get()


class JsonFormatter(logging.Formatter):
    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(record.created))}"
            f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "process": self.process,
            "logger": record.name,
            "msg": record.getMessage(),
            **_ids.get(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(process: str, level: str, fmt: str) -> None:
    """The root handler of a process: JSON lines (`json`) or the plain text format
    (`text`). Raises ValueError for an unknown level or format."""
    if fmt not in ("json", "text"):
        raise ValueError(f"RECON_LOG_FORMAT: unknown format {fmt!r} (json or text)")
    logging.basicConfig(
        level=level, format=f"%(asctime)s {process} %(levelname)s %(name)s: %(message)s"
    )
    if fmt == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter(process))
