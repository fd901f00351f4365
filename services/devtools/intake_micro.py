"""Micro-benchmark of the intake's CPU per request inside the process: the app as built, its
Postgres and Kafka faked at the seams the routes call (tests/unit/test_lane.py's fakes, so
what is measured is the app that test holds to the contract), driven over raw ASGI behind
uvicorn's proxy-headers layer, no sockets.

`python -m services.devtools.intake_micro` prints, for an accepted webhook and an accepted
submission: microseconds of process CPU per request (the least and the median of
`--rounds` rounds of `-n` requests: the least is the one the machine's other work disturbed
least) and Python function calls per request (cProfile's count: the same on any machine
load, a check that a change removed work rather than moved it). With `--suspend` each faked
statement and produce first yields to the loop once, as the real ones do, so every layer's
coroutine is resumed as often as in the server. The rest of the intake's CPU (uvicorn's
parsing and connections, asyncpg, aiokafka, the loop) is outside this and is measured by
the benchmark (docs/benchmark.md, "Where the intake's CPU goes"). Compare a change with its
base in alternation, the same file run from each checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib
import json
import pstats
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from services.intake.example import example_transaction

# Loaded by name: mypy reads the test files as top-level modules, not as tests.unit.*.
lane_fakes: Any = importlib.import_module("tests.unit.test_lane")

Request = tuple[str, str, dict[str, str], bytes]


def _scope(method: str, path: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    raw += [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": raw,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }


async def _one(app: Callable[..., Awaitable[None]], request: Request) -> int:
    method, path, headers, body = request
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(_scope(method, path, headers, body), receive, send)
    return statuses[0]


def _suspending() -> None:
    """Each faked statement and produce yields to the loop once before it answers."""
    for cls, name in (
        (lane_fakes.Batches, "look_up"),
        (lane_fakes.Batches, "remember"),
        (lane_fakes.Producer, "send_and_wait"),
        (lane_fakes.Conn, "fetchrow"),
        (lane_fakes.Conn, "execute"),
    ):
        answer = getattr(cls, name)

        async def after_a_yield(self: Any, *args: Any, _answer: Any = answer, **kw: Any) -> Any:
            await asyncio.sleep(0)
            return await _answer(self, *args, **kw)

        setattr(cls, name, after_a_yield)


async def _measure(count: int, rounds: int) -> None:
    intake: Any = lane_fakes._app(lane_fakes.Seams(), lane=True)
    app = ProxyHeadersMiddleware(intake, trusted_hosts="127.0.0.1")
    event = lane_fakes._event()
    webhook = ("POST", "/v1/webhooks/sandbox", lane_fakes._signed(event), event)
    submissions = iter(range(10**9))

    def submission() -> Request:
        body = json.dumps(example_transaction(f"order-{next(submissions)}"))
        return ("POST", "/v1/transactions", lane_fakes.KEY, body.encode())

    cases: tuple[tuple[str, Callable[[], Request], int], ...] = (
        ("webhook", lambda: webhook, 200),
        ("submission", submission, 202),
    )
    for name, make, expected in cases:
        assert await _one(app, make()) == expected, f"the {name} was not accepted"
        spent = []
        for _ in range(rounds):
            requests = [make() for _ in range(count)]
            began = time.process_time()
            for request in requests:
                await _one(app, request)
            spent.append((time.process_time() - began) / count * 1e6)
        requests = [make() for _ in range(200)]
        profile = cProfile.Profile()
        profile.enable()
        for request in requests:
            await _one(app, request)
        profile.disable()
        calls = pstats.Stats(profile).total_calls / len(requests)  # type: ignore[attr-defined]
        least, median = min(spent), statistics.median(spent)
        print(
            f"{name}: {least:.1f} us of CPU per request (median {median:.1f}),"
            f" {calls:.0f} Python calls per request"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=2000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--suspend", action="store_true", help="each fake yields once first")
    args = parser.parse_args()
    if args.suspend:
        _suspending()
    asyncio.run(_measure(args.n, args.rounds))


if __name__ == "__main__":
    main()
