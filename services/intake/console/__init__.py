"""The operator console (docs/console.md): server-rendered pages under /console, served by
the intake, for operator keys only.

- security: the login with an operator key, the session cookie, CSRF on every form, the
  headers (CSP) of every console answer;
- pages: what a person reads (needs a person, transactions, one transaction's timeline,
  controls, the counts that refresh on their own);
- actions: what a person does (resolve, approve, reject, kill switches, breakers), each
  through the API route that does it for a client, so the console has no rule of its own;
- effects: what each button will do, in words, shown before it is pressed.

Every string that came from an agent, a provider or a person (payloads, evidence, reasons,
notes) reaches the page through Jinja2's autoescape only; no template marks anything safe.
"""

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from services.intake.console import actions, pages, security
from services.intake.console.render import STATIC


def install(app: FastAPI) -> None:
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
    app.include_router(security.router)
    app.include_router(pages.router)
    app.include_router(actions.router)
    security.install(app)
