"""The console's security headers (services.intake.console.security.ConsoleHeaders): on every
`/console` answer, replacing a page's own value, and on nothing else."""

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from fastapi.testclient import TestClient

from services.intake.console.security import HEADERS, ConsoleHeaders


def _client() -> TestClient:
    app = FastAPI()

    @app.get("/console/page")
    async def page() -> PlainTextResponse:
        return PlainTextResponse("hi", headers={"Cache-Control": "max-age=60"})

    @app.get("/v1/thing")
    async def thing() -> PlainTextResponse:
        return PlainTextResponse("ok")

    app.add_middleware(ConsoleHeaders)
    return TestClient(app)


def test_console_answers_carry_every_header_once_replacing_the_pages_own() -> None:
    answer = _client().get("/console/page")
    assert answer.status_code == 200 and answer.text == "hi"
    for name, value in HEADERS.items():
        assert answer.headers.get_list(name) == [value]


def test_console_404_carries_them_too() -> None:
    answer = _client().get("/console/nowhere")
    assert answer.status_code == 404
    assert answer.headers["Content-Security-Policy"] == HEADERS["Content-Security-Policy"]


def test_api_answers_do_not() -> None:
    answer = _client().get("/v1/thing")
    assert answer.status_code == 200
    assert not set(HEADERS) & set(answer.headers)
