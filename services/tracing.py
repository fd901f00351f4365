"""W3C trace context through every hop of a transaction (OpenTelemetry).

The context travels in the `traceparent`/`tracestate` headers: of the agent's HTTP request
to the intake, of every Kafka record recon produces (command, event, observation), and of
the dispatcher's HTTP call to the provider. Each process opens one span per unit of work
(an HTTP request, a decided input, a provider call) under the context it received, so one
submission's spans form one trace, and binds the span's trace id with the transaction's ids
to its log lines (services.logging_json).

`RECON_TRACE_EXPORTER` says where finished spans go: `none` (the default: no SDK is set up,
spans are the API's no-op ones and cost next to nothing, and a context an agent sent is
still passed on unchanged), `otlp` (OTLP over HTTP to a collector or backend, configured by
the standard `OTEL_EXPORTER_OTLP_*` variables: endpoint, headers, timeout, compression),
`console` (stderr), `file:<path>` (one span per line as JSON, appended; `{process}` in the
path is replaced by the process name, so each process writes its own file) or `memory`
(kept in this process, `memory_exporter`, for in-process tests). With it unset or `none`,
the standard `OTEL_TRACES_EXPORTER=otlp` turns OTLP on too. Each process is the service
`recon-<process>` (`OTEL_SERVICE_NAME` overrides it; `OTEL_RESOURCE_ATTRIBUTES` adds to it).

Span attributes follow OpenTelemetry's semantic conventions where one applies (`http.*` on
the intake's requests and the provider calls, `messaging.*` on every Kafka record a process
handles), and recon's own ids as `recon.*`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import baggage, propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context, get_current
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace import Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from services.logging_json import bind, log_context

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

_tracer = trace.get_tracer("recon")
_HEADERS = ("traceparent", "tracestate")
# Set by configure_tracing("...", "memory"): what an in-process test reads.
memory_exporter: Any = None
# Whether configure_tracing installed the SDK: off, spans record nothing.
_configured = False


def configure_tracing(service: str, exporter: str) -> None:
    """Install the SDK for this process, or leave the API's no-op tracer for `none`.
    Raises ValueError for an exporter it does not know."""
    global memory_exporter, _configured
    if exporter in ("", "none") and os.environ.get("OTEL_TRACES_EXPORTER", "").strip() == "otlp":
        exporter = "otlp"
    if exporter in ("", "none"):
        return
    # Imported only when tracing is on: a process that does not trace loads no SDK.
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    name = os.environ.get("OTEL_SERVICE_NAME", "").strip() or f"recon-{service}"
    resource = Resource.create({"service.name": name, "service.namespace": "recon"})
    provider = TracerProvider(resource=resource)
    if exporter == "memory":
        memory_exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory_exporter))
    else:
        # Exported off the event loop, in batches; flushed when the process exits.
        chosen = span_exporter(service, exporter)
        provider.add_span_processor(BatchSpanProcessor(chosen, schedule_delay_millis=500))
    trace.set_tracer_provider(provider)
    _configured = True


def span_exporter(service: str, exporter: str) -> SpanExporter:
    """The exporter `RECON_TRACE_EXPORTER` names (but `memory`), for process `service`."""
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    if exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()  # endpoint, headers, ...: the OTEL_EXPORTER_OTLP_* variables
    if exporter == "console":
        return ConsoleSpanExporter(service_name=service)
    if exporter.startswith("file:") and len(exporter) > 5:
        out = open(exporter[5:].replace("{process}", service), "a", buffering=1)
        return ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")
    raise ValueError(
        f"RECON_TRACE_EXPORTER: unknown exporter {exporter!r}"
        " (none, otlp, console, file:<path> or memory)"
    )


def recording() -> bool:
    """Whether spans record anything (configure_tracing installed the SDK)."""
    return _configured


def context_from(headers: Iterable[tuple[str, bytes]] | None) -> Context | None:
    """The trace context a Kafka record carries, None when it carries none."""
    carrier = {k: v.decode("latin-1") for k, v in headers or () if k in _HEADERS}
    return propagate.extract(carrier) if carrier else None


def context_from_http(headers: Mapping[str, str]) -> Context | None:
    carrier = {k: headers[k] for k in _HEADERS if k in headers}
    return propagate.extract(carrier) if carrier else None


def kafka_headers() -> list[tuple[str, bytes]] | None:
    """The current trace context as Kafka headers; None when there is none to pass on."""
    if not _context_to_pass():
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return [(k, v.encode("latin-1")) for k, v in carrier.items()] or None


# The W3C propagators (OpenTelemetry's default, `OTEL_PROPAGATORS=tracecontext,baggage`)
# write nothing for a context with no valid span and no baggage, which is every record's
# with tracing off and no context sent in; the decider asks for every event it writes, and
# `propagate.inject` cost ~10 us to say so. Any other propagator is always asked.
_W3C = (TraceContextTextMapPropagator, W3CBaggagePropagator)
_textmap_known: tuple[object, bool] = (None, False)


def _w3c_only(textmap: object) -> bool:
    if isinstance(textmap, _W3C):
        return True
    # The composite's parts are private: if it ever hides them, every call injects.
    parts = (
        getattr(textmap, "_propagators", None) if isinstance(textmap, CompositePropagator) else None
    )
    return parts is not None and all(isinstance(p, _W3C) for p in parts)


def _context_to_pass() -> bool:
    """Whether `propagate.inject` may write a header now."""
    global _textmap_known
    textmap = propagate.get_global_textmap()
    if _textmap_known[0] is not textmap:
        _textmap_known = (textmap, _w3c_only(textmap))
    if not _textmap_known[1]:
        return True
    current = get_current()
    if not current:
        # An empty context holds neither a span nor baggage; asking each for it cost ~4 us
        # a record (the intake produces four per transaction; issue 24), this ~0.1.
        return False
    return trace.get_current_span(current).get_span_context().is_valid or bool(
        baggage.get_all(current)
    )


def http_headers() -> dict[str, str]:
    carrier: dict[str, str] = {}
    if _context_to_pass():  # as kafka_headers: asks no propagator when none would write
        propagate.inject(carrier)
    return carrier


def span(
    name: str,
    parent: Context | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    semantic: Mapping[str, str | int] | None = None,
    **ids: str | int | None,
) -> AbstractContextManager[Span]:
    """A span under `parent` (or the current one), the ids as its `recon.*` attributes and
    on every log line written inside it, with the trace id when there is a trace;
    `semantic`: attributes under OpenTelemetry's own names (`http.*`, `messaging.*`)."""
    if (
        parent is None
        and not _configured
        and not trace.get_current_span().get_span_context().is_valid
    ):
        # Tracing off and no trace to continue: the API's span would be the invalid one,
        # recording nothing, made current and ended for nothing; only the log context it
        # scopes is kept. A provider call opens two (with http_headers: 18.7 -> 8.0 us).
        # The block is returned, not a generator around it, as `consuming` does: 0.7 us
        # less a span (call_tracing_micro: 4.8-5.1 -> 3.5 us a provider call's two).
        return _Unrecorded(ids)
    return _recorded(name, parent, kind, semantic, ids)


class _Unrecorded:
    """A span's block with tracing off: the log context of its ids, the invalid span."""

    __slots__ = ("_block",)

    def __init__(self, ids: dict[str, str | int | None]) -> None:
        self._block = log_context(**ids, trace_id=None)

    def __enter__(self) -> Span:
        self._block.__enter__()
        return trace.INVALID_SPAN

    def __exit__(self, *exc: Any) -> None:
        self._block.__exit__(*exc)


@contextmanager
def _recorded(
    name: str,
    parent: Context | None,
    kind: SpanKind,
    semantic: Mapping[str, str | int] | None,
    ids: dict[str, str | int | None],
) -> Iterator[Span]:
    attributes = {f"recon.{k}": v for k, v in ids.items() if v is not None}
    attributes |= dict(semantic or {})
    with _tracer.start_as_current_span(name, context=parent, kind=kind, attributes=attributes) as s:
        ctx = s.get_span_context()
        trace_id = format(ctx.trace_id, "032x") if ctx.is_valid else None
        with log_context(**ids, trace_id=trace_id):
            yield s


def consuming(name: str, record: Any, group: str) -> AbstractContextManager[object]:
    """A span for processing one consumed Kafka record, under the context its producer
    sent. With tracing off and no context to pass on, only the log context the span would
    have scoped (ids `annotate`d inside end with it): such a span records nothing and
    cost ~20 us per record, on the decider's path for every input. It returns the block
    rather than being a `@contextmanager` generator around it: the generator cost 0.7 us
    more per input (1.22 -> 0.51 us in-process, decider_micro's `consume` row)."""
    parent = context_from(record.headers)
    if parent is None and not recording():
        return log_context()
    return span(name, parent, semantic=kafka_record(record, group))


def kafka_record(record: Any, group: str) -> dict[str, str | int]:
    """The semantic-convention attributes of processing one consumed Kafka record."""
    return {
        "messaging.system": "kafka",
        "messaging.operation.type": "process",
        "messaging.destination.name": record.topic,
        "messaging.destination.partition.id": str(record.partition),
        "messaging.kafka.offset": record.offset,
        "messaging.consumer.group.name": group,
    }


def annotate(**ids: str | int | None) -> None:
    """Ids learnt inside a span: on the span and on the log lines that follow."""
    known = {k: v for k, v in ids.items() if v is not None}
    current = trace.get_current_span()
    if current.is_recording():  # a span that records nothing (tracing off) drops them
        for k, v in known.items():
            current.set_attribute(f"recon.{k}", v)
    bind(**known)
