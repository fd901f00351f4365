"""W3C trace context through every hop of a transaction (OpenTelemetry).

The context travels in the `traceparent`/`tracestate` headers: of the agent's HTTP request
to the intake, of every Kafka record recon produces (command, event, observation), and of
the dispatcher's HTTP call to the provider. Each process opens one span per unit of work
(an HTTP request, a decided input, a provider call) under the context it received, so one
submission's spans form one trace, and binds the span's trace id with the transaction's ids
to its log lines (services.logging_json).

`RECON_TRACE_EXPORTER` says where finished spans go: `none` (the default: no SDK is set up,
spans are the API's no-op ones and cost next to nothing, and a context an agent sent is
still passed on unchanged), `console` (stderr), `file:<path>` (one span per line as JSON,
appended; `{process}` in the path is replaced by the process name; a stand-in for an OTLP
collector, which tests read) or `memory` (kept in this process, `memory_exporter`, for
in-process tests).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind

from services.logging_json import bind, log_context

_tracer = trace.get_tracer("recon")
_HEADERS = ("traceparent", "tracestate")
# Set by configure_tracing("...", "memory"): what an in-process test reads.
memory_exporter: Any = None
_file: IO[str] | None = None


def configure_tracing(service: str, exporter: str) -> None:
    """Install the SDK for this process, or leave the API's no-op tracer for `none`.
    Raises ValueError for an exporter it does not know."""
    global memory_exporter, _file
    if exporter in ("", "none"):
        return
    # Imported only when tracing is on: a process that does not trace loads no SDK.
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
        SpanExporter,
    )
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": f"recon-{service}"}))
    chosen: SpanExporter
    if exporter == "console":
        chosen = ConsoleSpanExporter(service_name=service)
    elif exporter.startswith("file:") and len(exporter) > 5:
        _file = open(exporter[5:], "a", buffering=1)
        chosen = ConsoleSpanExporter(
            out=_file, formatter=lambda span: span.to_json(indent=None) + "\n"
        )
    elif exporter == "memory":
        memory_exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory_exporter))
        trace.set_tracer_provider(provider)
        return
    else:
        raise ValueError(
            f"RECON_TRACE_EXPORTER: unknown exporter {exporter!r}"
            " (none, console, file:<path> or memory)"
        )
    # Exported off the event loop, in batches; flushed when the process exits.
    provider.add_span_processor(BatchSpanProcessor(chosen, schedule_delay_millis=500))
    trace.set_tracer_provider(provider)


def context_from(headers: Iterable[tuple[str, bytes]] | None) -> Context | None:
    """The trace context a Kafka record carries, None when it carries none."""
    carrier = {k: v.decode("latin-1") for k, v in headers or () if k in _HEADERS}
    return propagate.extract(carrier) if carrier else None


def context_from_http(headers: Mapping[str, str]) -> Context | None:
    carrier = {k: headers[k] for k in _HEADERS if k in headers}
    return propagate.extract(carrier) if carrier else None


def kafka_headers() -> list[tuple[str, bytes]] | None:
    """The current trace context as Kafka headers; None when there is none to pass on."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return [(k, v.encode("latin-1")) for k, v in carrier.items()] or None


def http_headers() -> dict[str, str]:
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


@contextmanager
def span(
    name: str,
    parent: Context | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    **ids: str | int | None,
) -> Iterator[Span]:
    """A span under `parent` (or the current one), the ids as its `recon.*` attributes and
    on every log line written inside it, with the trace id when there is a trace."""
    attributes = {f"recon.{k}": v for k, v in ids.items() if v is not None}
    with _tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attributes) as s:
        ctx = s.get_span_context()
        trace_id = format(ctx.trace_id, "032x") if ctx.is_valid else None
        with log_context(**ids, trace_id=trace_id):
            yield s


def annotate(**ids: str | int | None) -> None:
    """Ids learnt inside a span: on the span and on the log lines that follow."""
    known = {k: v for k, v in ids.items() if v is not None}
    current = trace.get_current_span()
    for k, v in known.items():
        current.set_attribute(f"recon.{k}", v)
    bind(**known)
