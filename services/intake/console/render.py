"""The console's templates: Jinja2 with autoescape on for every template (select_autoescape
would leave a template whose name does not end in .html unescaped; there is none, and none
may be). A missing field renders empty: events and evidence differ in their fields."""

import json
from pathlib import Path
from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader

from services.intake.console.sessions import ConsoleUser

HERE = Path(__file__).parent
STATIC = HERE / "static"
HTMX = "htmx-2.0.11.min.js"

templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=True,
)


def _pretty(value: Any) -> str:
    """JSON for a <pre>, escaped by autoescape like any other string."""
    return json.dumps(value, indent=2, sort_keys=True, default=str)


templates.filters["pretty"] = _pretty


def page(name: str, user: ConsoleUser | None, status: int = 200, **context: Any) -> HTMLResponse:
    html = templates.get_template(name).render(user=user, htmx=HTMX, **context)
    return HTMLResponse(html, status_code=status)
