"""The console's templates: Jinja2 with autoescape on for every template (select_autoescape
would leave a template whose name does not end in .html unescaped; there is none, and none
may be). A missing field renders empty: events and evidence differ in their fields."""

import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi.responses import HTMLResponse

from services.intake.console.sessions import ConsoleUser

if TYPE_CHECKING:
    from jinja2 import Environment

HERE = Path(__file__).parent
STATIC = HERE / "static"
HTMX = "htmx-2.0.11.min.js"


@cache
def templates() -> "Environment":
    """Made at the first page: Jinja2 is ~0.1 s of CPU at every intake's start (a test
    stack's seven processes import at once on two cores), and most intakes never serve
    the console."""
    from jinja2 import Environment, FileSystemLoader

    environment = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=True,
    )
    environment.filters["pretty"] = _pretty
    return environment


def _pretty(value: Any) -> str:
    """JSON for a <pre>, escaped by autoescape like any other string."""
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def page(name: str, user: ConsoleUser | None, status: int = 200, **context: Any) -> HTMLResponse:
    html = templates().get_template(name).render(user=user, htmx=HTMX, **context)
    return HTMLResponse(html, status_code=status)
