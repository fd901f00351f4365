"""Telemetry reaches a backend (issue 25, item 2): with only the standard OpenTelemetry
variables set, the README's transaction arrives at an OTLP collector (an in-process
receiver here) as one trace spanning the intake, the decider and its call to the provider,
with semantic-convention attributes on each hop."""

import asyncio
import secrets
import time
from collections.abc import Callable

from opentelemetry.proto.trace.v1.trace_pb2 import Span
from support.otlp_receiver import ReceivedSpan, otlp_receiver
from support.recon_client import op, transaction
from support.stack_fixtures import StackWith


async def test_the_readme_transaction_reaches_an_otlp_collector_as_one_trace(
    stack_with: StackWith, free_port: Callable[[], int]
) -> None:
    async with otlp_receiver(free_port()) as collector:
        async with stack_with(
            OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint
        ) as (stack, recon):
            trace_id = secrets.token_hex(16)
            response = await recon.http.post(
                f"{stack.intake_url}/v1/transactions",
                json=transaction("otlp-1"),
                headers={
                    **recon.headers,
                    "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01",
                },
            )
            assert response.status_code == 202, response.text
            tx = await recon.wait_terminal("otlp-1")
            assert tx["status"] == "committed"
            charge_key = op(tx, "charge")["op_key"]

            def hop(service: str, name: str) -> list[ReceivedSpan]:
                return [
                    s
                    for s in collector.spans
                    if s.trace_id == trace_id and s.service == service and s.name == name
                ]

            deadline = time.monotonic() + 30
            while not (
                hop("recon-intake", "intake POST /v1/transactions")
                and hop("recon-decider", "decider.decide")
                and any(
                    s.attributes.get("recon.op_key") == charge_key
                    for s in hop("recon-decider", "dispatcher.call")
                )
                and hop("recon-decider", "POST")
            ):
                assert time.monotonic() < deadline, f"spans of trace {trace_id}: {collector.spans}"
                await asyncio.sleep(0.2)

    [request] = hop("recon-intake", "intake POST /v1/transactions")
    assert request.kind == Span.SPAN_KIND_SERVER
    assert request.attributes["http.request.method"] == "POST"
    assert request.attributes["http.route"] == "/v1/transactions"
    assert request.attributes["http.response.status_code"] == 202
    decided = hop("recon-decider", "decider.decide")[0].attributes
    assert decided["messaging.system"] == "kafka"
    assert decided["messaging.destination.name"].endswith("recon.commands")
    calls = hop("recon-decider", "POST")
    assert all(c.kind == Span.SPAN_KIND_CLIENT for c in calls)
    charge_call = [c for c in calls if c.attributes["url.full"].endswith("/v1/payments/charge")]
    assert charge_call and charge_call[0].attributes["http.response.status_code"] == 200
    assert charge_call[0].attributes["server.port"] == int(stack.sandbox_url.rsplit(":", 1)[1])
