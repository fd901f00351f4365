"""services.tracing.kafka_headers with tracing off (the no-op API): a context sent in is
passed on unchanged, and nothing is written when there is none (its fast path asks no
propagator then)."""

from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry import baggage, context, propagate
from opentelemetry.propagators.textmap import TextMapPropagator

from services import tracing

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _record(headers: list[tuple[str, bytes]]) -> SimpleNamespace:
    return SimpleNamespace(headers=headers, topic="recon.commands", partition=0, offset=7)


def test_nothing_to_pass_on_writes_no_header() -> None:
    with tracing.consuming("decider.decide", _record([]), "group"):
        assert tracing.kafka_headers() is None


def test_a_context_sent_in_is_passed_on_unchanged() -> None:
    record = _record([("traceparent", TRACEPARENT.encode())])
    with tracing.consuming("decider.decide", record, "group"):
        assert tracing.kafka_headers() == [("traceparent", TRACEPARENT.encode())]


def test_baggage_alone_is_passed_on() -> None:
    token = context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        assert tracing.kafka_headers() == [("baggage", b"tenant=acme")]
    finally:
        context.detach(token)


class _Stamp(TextMapPropagator):
    """A propagator that writes a header with no span at all: it must still be asked."""

    def extract(self, carrier: Any, context: Any = None, getter: Any = None) -> Any:
        return context

    def inject(self, carrier: Any, context: Any = None, setter: Any = None) -> None:
        carrier["x-stamp"] = "1"

    @property
    def fields(self) -> set[str]:
        return {"x-stamp"}


def test_another_propagator_is_always_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(propagate, "_HTTP_TEXT_FORMAT", _Stamp())
    assert tracing.kafka_headers() == [("x-stamp", b"1")]


def test_a_provider_call_passes_on_the_trace_of_its_decision_and_nothing_without_one() -> None:
    # The executor's span and the HTTP client span inside it, as a provider call opens them.
    parent = tracing.context_from([("traceparent", TRACEPARENT.encode())])
    with tracing.span("dispatcher.call", parent, tx_id="tx-1"):
        with tracing.span("POST") as call:
            assert call.get_span_context().trace_id == int(TRACEPARENT.split("-")[1], 16)
            assert tracing.http_headers() == {"traceparent": TRACEPARENT}
    with tracing.span("dispatcher.call", tracing.context_from(None), tx_id="tx-1"):
        with tracing.span("POST") as call:
            assert not call.get_span_context().is_valid
            assert tracing.http_headers() == {}
