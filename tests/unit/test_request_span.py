"""A request's trace context with tracing off (RECON_TRACE_EXPORTER none, the default):
the intake opens no span for a request that sent none (services.intake.request_span), and
still passes on, unchanged, the context an agent sent: the command it produces carries the
agent's `traceparent`. The ids a request binds to its log lines end with the request.

The app is driven in-process with Postgres and Kafka faked (tests/unit/test_lane.py's)."""

import secrets

import pytest
from test_lane import KEY, SUBMISSION, Seams, _answer, _app

from services import tracing
from services.logging_json import _ids


@pytest.fixture(autouse=True)
def tracing_off() -> None:
    assert not tracing.recording()


async def test_an_agents_trace_context_is_passed_on_with_tracing_off() -> None:
    trace_id = secrets.token_hex(16)
    traceparent = f"00-{trace_id}-{secrets.token_hex(8)}-01"
    seams = Seams()
    status, _, _ = await _answer(
        _app(seams, lane=True),
        "POST",
        "/v1/transactions",
        {**KEY, "traceparent": traceparent},
        SUBMISSION,
    )
    assert status == 202
    [headers] = seams.headers
    assert dict(headers)["traceparent"].decode().split("-")[1] == trace_id


async def test_a_request_without_one_produces_no_trace_context_and_its_log_ids_end_with_it() -> (
    None
):
    seams = Seams()
    status, _, _ = await _answer(
        _app(seams, lane=True), "POST", "/v1/transactions", KEY, SUBMISSION
    )
    assert status == 202
    assert seams.headers == [None]
    assert "tx_id" not in _ids.get()
