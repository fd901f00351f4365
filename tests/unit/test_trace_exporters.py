"""RECON_TRACE_EXPORTER's exporters (services.tracing.span_exporter), built without
installing them as the process's tracer provider."""

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from services.tracing import span_exporter


def test_file_exporter_replaces_the_process_placeholder(tmp_path: Path) -> None:
    # The documented `{process}` used to be kept literally: every process appended to one
    # file named "spans-{process}.jsonl".
    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(span_exporter("decider", f"file:{tmp_path}/spans-{{process}}.jsonl"))
    )
    with provider.get_tracer("test").start_as_current_span("decider.decide"):
        pass
    provider.shutdown()
    assert [p.name for p in tmp_path.iterdir()] == ["spans-decider.jsonl"]
    assert '"decider.decide"' in (tmp_path / "spans-decider.jsonl").read_text()


def test_otlp_exporter_takes_the_standard_endpoint_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector.example:4318")
    exporter = span_exporter("intake", "otlp")
    assert exporter._endpoint == "http://collector.example:4318/v1/traces"  # type: ignore[attr-defined]


def test_an_unknown_exporter_names_the_variable_and_the_choices() -> None:
    with pytest.raises(ValueError, match="RECON_TRACE_EXPORTER: unknown exporter 'jaeger'"):
        span_exporter("intake", "jaeger")
