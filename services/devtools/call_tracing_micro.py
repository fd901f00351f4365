"""Micro-benchmark of what tracing costs a provider call made by the decider when tracing is
off and no trace was sent in (the benchmark's case): the executor's span, the HTTP client
span inside it and the HTTP headers it passes on (services.tracing).

`python -m services.devtools.call_tracing_micro` prints microseconds of CPU per call, the
best of five rounds (the process's CPU time, not the wall clock). It uses only what main has
had since the decider made the calls, so the same file runs against an older checkout for a
before/after (`PYTHONPATH=<checkout> python services/devtools/call_tracing_micro.py`).
"""

import time

from opentelemetry.trace import SpanKind

from services import tracing

SEMANTIC: dict[str, str | int] = {
    "http.request.method": "POST",
    "url.full": "http://127.0.0.1:8090/v1/charges",
    "server.address": "127.0.0.1",
    "server.port": 8090,
}


def one_call() -> None:
    # As services.dispatcher.executor and services.providers.http open them.
    with tracing.span(
        "dispatcher.call",
        tracing.context_from(None),
        SpanKind.CLIENT,
        tx_id="tx-1",
        op_key="rk1_x",
        attempt=1,
        action="charge",
    ):
        with tracing.span("POST", kind=SpanKind.CLIENT, semantic=SEMANTIC) as span:
            {"content-type": "application/json", **tracing.http_headers()}
            span.set_attribute("http.response.status_code", 200)


def main(calls: int = 20_000, rounds: int = 5) -> None:
    for _ in range(calls // 10):
        one_call()
    best = float("inf")
    for _ in range(rounds):
        began = time.process_time()
        for _ in range(calls):
            one_call()
        best = min(best, (time.process_time() - began) / calls * 1e6)
    print(f"tracing per provider call (two spans and the headers): {best:.1f} us of CPU")


if __name__ == "__main__":
    main()
