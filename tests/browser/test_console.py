"""The operator console (services.intake.console) in a real browser: Debian's Chromium,
installed by `make fetch` (services/devtools/infra/chromium.py), driven by Playwright,
against the whole stack as real processes (Kafka, Postgres, the sandbox, every recon
service). One stack for the module: each test uses transactions of its own.

The flows of issue 21: an operator logs in, finds a transaction stuck `unknown`, reads the
evidence, resolves it and sees it commit; approves a destructive step after reading its
preview; engages a kill switch, sees a held dispatch, releases it. And the browser
surface's protections: an agent key opens nothing, a form without its CSRF token changes
nothing, HTML and script in payloads, reasons and notes are shown as text and never run,
and another tenant's operator sees none of it.

RECON_CONSOLE_SCREENSHOTS=1 saves the main pages to docs/console/ (docs/console.md).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from conftest import Infra
from playwright.async_api import Browser, BrowserContext, Page, async_playwright
from support.recon_client import Recon
from support.review_requests import request_review
from support.stack_fixtures import stack_of_its_own

from services.devtools.infra._process import REPO_ROOT
from services.devtools.infra.chromium import LAUNCH_ARGS, ensure_chromium
from services.devtools.stack import Stack
from services.intake.console import actions, pages, security

SHOTS = REPO_ROOT / "docs" / "console" if os.environ.get("RECON_CONSOLE_SCREENSHOTS") else None
# Strings an agent or a provider could send: each must show as text and never run.
SCRIPT = "<script>window.__pwned = 1</script>"
MARKUP = '<img src="x" id="smuggled" onerror="window.__pwned = 1">'


@pytest.fixture(scope="module")
async def stack(infra: Infra, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with stack_of_its_own(
        infra,
        tmp_path_factory.mktemp("console") / "logs",
        RECON_LOG_LEVEL="INFO",
        RECON_API_KEYS="demo-key=demo,other-key=other",
        RECON_OPERATOR_KEYS="ops-key=demo:operator,other-ops-key=other:mallory",
        # The tests settle unknowns themselves: the reconciler stays out of the way.
        RECON_RECONCILE_AFTER_S="600",
    ) as started:
        yield started


@pytest.fixture(scope="module")
async def recon(stack: Stack) -> AsyncIterator[Recon]:
    client = Recon(stack.intake_url, stack.sandbox_url)
    yield client
    await client.close()


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    chromium = ensure_chromium()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(chromium), args=list(LAUNCH_ARGS), headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def context(browser: Browser, stack: Stack) -> AsyncIterator[BrowserContext]:
    fresh = await browser.new_context(
        base_url=stack.intake_url, viewport={"width": 1280, "height": 900}
    )
    # Any dialog is a script that ran (an alert smuggled through a payload).
    fresh.on("dialog", lambda dialog: pytest.fail(f"a dialog opened: {dialog.message}"))
    yield fresh
    await fresh.close()


async def logged_in(context: BrowserContext, key: str = "ops-key") -> Page:
    page = await context.new_page()
    await page.goto("/console/login")
    await page.fill("input[name=key]", key)
    await page.click("button[type=submit]")
    await page.wait_for_url("**/console")
    return page


async def until(check: Callable[[], Awaitable[Any]], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.3)
    raise AssertionError(f"not within {timeout}s: {what}")


async def shot(page: Page, name: str) -> None:
    if SHOTS is not None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


async def nothing_ran(page: Page) -> None:
    """The smuggled strings are text: no script of theirs ran, no element of theirs exists
    (the page's own script, htmx, is the only one)."""
    assert await page.evaluate("window.__pwned") is None
    assert await page.locator("#smuggled").count() == 0
    assert await page.evaluate("document.scripts.length") == 1


def charge(tx_id: str, customer: str = "cus_1") -> dict[str, Any]:
    return {
        "tx_id": tx_id,
        "agent_id": "agent-7",
        "steps": [
            {"action": "charge", "provider": "sandbox", "operation": "payments.charge",
             "payload": {"amount": 1299, "currency": "usd", "customer": customer,
                         "description": SCRIPT + MARKUP}},
        ],
    }  # fmt: skip


async def test_an_operator_resolves_an_unknown_charge_and_sees_it_commit(
    stack: Stack, recon: Recon, context: BrowserContext
) -> None:
    # A charge whose outcome nothing can learn: the response is lost, lookups fail and
    # the webhook never comes; the review's reason and the payload carry markup.
    await recon.arm("payments.charge", "lookup_unavailable", times=1000)
    await recon.arm("payments.charge", "lose_response_after_commit")
    await recon.arm("payments.charge", "webhook_drop")
    try:
        assert (await recon.submit(charge("stuck-1"))).status_code == 202
        await recon.wait_until(
            "stuck-1",
            lambda t: (
                t["operations"][0]["state"] == "unknown"
                and any(e["source"] == "lookup" for e in t["operations"][0]["evidence"])
            ),
            timeout=60,
            failure="the charge did not become unknown after a failed lookup",
        )
    finally:
        await recon.disarm()
    await request_review(stack, "stuck-1", reason=f"lookup_budget_exhausted {SCRIPT}{MARKUP}")

    page = await logged_in(context)

    async def review_listed() -> bool:
        await page.reload()
        return await page.locator("#reviews a", has_text="Read the evidence").count() > 0

    await until(review_listed, "the open review on the needs-a-person page")
    assert await page.locator("#count-reviews").inner_text() == "1"
    await shot(page, "needs-a-person")
    await page.click("#reviews a.button")
    # The evidence, as recon holds it: the lookups that could not answer, the payload.
    assert "lookup" in await page.locator("#evidence").inner_text()
    assert SCRIPT in await page.locator("#review-reason").inner_text()
    await nothing_ran(page)
    await shot(page, "review")
    await page.check("input[value=applied]")
    await page.fill("textarea[name=note]", f"seen in the dashboard {SCRIPT}")
    await page.click("#resolve button")
    effect = await page.locator("#effect").inner_text()
    assert "as applied records that the provider made the effect" in effect, effect
    await shot(page, "confirm")
    await page.click("#confirm")

    await page.goto("/console/transactions/stuck-1")

    async def committed() -> bool:
        await page.reload()
        return await page.locator("#tx-status").inner_text() == "committed"

    await until(committed, "the transaction committed after the resolution")
    assert (await page.locator("#chain").inner_text()).startswith("Hash chain verified")
    timeline = await page.locator("#timeline").inner_text()
    assert "ReviewResolved" in timeline and "by operator" in timeline
    await nothing_ran(page)
    await shot(page, "transaction")
    log = stack.log_tail("intake", 400)
    assert "console: operator of demo resolved review" in log, log


async def test_an_operator_approves_a_destructive_step_after_reading_its_preview(
    recon: Recon, context: BrowserContext
) -> None:
    seeded = await recon.http.post(
        f"{recon.sandbox_url}/v1/records",
        json={"resource": "rec-console", "data": {"n": 1}, "revision": 1},
    )
    assert seeded.status_code in (200, 201), seeded.text
    body = {
        "tx_id": "wipe-1",
        "agent_id": "agent-7",
        "steps": [{"action": "wipe", "provider": "sandbox", "operation": "records.delete",
                   "payload": {"resource": "rec-console"}}],
    }  # fmt: skip
    assert (await recon.submit(body)).status_code == 202
    await recon.wait_until(
        "wipe-1", lambda t: t["status"] == "awaiting_approval", 60, "no wait for approval"
    )
    # The agent previews what it asks for; the person approves that preview.
    preview = await recon.http.post(
        f"{recon.intake_url}/v1/previews", json=body, headers=recon.headers
    )
    assert preview.status_code == 200, preview.text

    page = await logged_in(context)
    await page.click("#approvals a.button")
    assert await page.locator("#digest").inner_text() == preview.json()["digest"]
    shown = await page.locator("#preview").inner_text()
    assert "irreversible" in shown and "rec-console" in shown, shown
    await shot(page, "approval")
    await page.click("#approve button")
    await page.wait_for_url("**/console/transactions/wipe-1")

    async def committed() -> bool:
        await page.reload()
        return await page.locator("#tx-status").inner_text() == "committed"

    await until(committed, "the approved delete committed")
    assert "approved by operator" in await page.locator("#timeline").inner_text()


async def test_a_kill_switch_holds_a_dispatch_until_released(
    recon: Recon, context: BrowserContext
) -> None:
    page = await logged_in(context)
    await page.goto("/console/controls")
    await page.fill("#engage input[name=operation]", "inventory.reserve")
    await page.fill("#engage input[name=reason]", f"runaway agent {SCRIPT}")
    await page.click("#engage button")
    await page.wait_for_url("**/console/controls")
    assert SCRIPT in await page.locator("#switches .reason").first.inner_text()
    await nothing_ran(page)

    body = {
        "tx_id": "held-1",
        "agent_id": "agent-7",
        "steps": [{"action": "reserve", "provider": "sandbox", "operation": "inventory.reserve",
                   "payload": {"sku": "sku-1", "qty": 1}}],
    }  # fmt: skip
    assert (await recon.submit(body)).status_code == 202

    async def held() -> bool:
        await page.reload()
        return await page.locator("#switches .held").first.inner_text() == "1"

    await until(held, "the dispatch held by the switch")
    await shot(page, "controls")
    assert (await recon.get("held-1")).json()["status"] != "committed"
    await page.click("#switches button:has-text('Release')")
    await page.wait_for_url("**/console/controls")
    await recon.wait_until("held-1", lambda t: t["status"] == "committed", 60, "not released")


async def test_a_form_without_its_csrf_token_changes_nothing(
    recon: Recon, context: BrowserContext
) -> None:
    page = await logged_in(context)
    # The session's cookie goes with it (same context); the token does not.
    answer = await page.request.post(
        "/console/kill-switches", form={"reason": "forged", "operation": "email.send"}
    )
    assert answer.status == 403
    forged = await page.request.post(
        "/console/kill-switches",
        form={"reason": "forged", "operation": "email.send", "csrf": "guessed"},
    )
    assert forged.status == 403
    switches = await recon.http.get(f"{recon.intake_url}/v1/kill-switches", headers=recon.headers)
    assert all(s["reason"] != "forged" for s in switches.json()["kill_switches"])


async def test_another_tenants_operator_sees_none_of_it(
    stack: Stack, recon: Recon, browser: Browser, context: BrowserContext
) -> None:
    assert (await recon.submit(charge("mine-1"))).status_code == 202
    await recon.wait_until("mine-1", lambda t: t["status"] == "committed", 60, "no commit")
    other = await logged_in(context, "other-ops-key")
    assert "mallory" in await other.locator("#who").inner_text()
    await other.goto("/console/transactions")
    assert "mine-1" not in await other.locator("main").inner_text()
    missing = await other.goto("/console/transactions/mine-1")
    assert missing is not None and missing.status == 404
    await other.goto("/console/controls")
    assert "runaway agent" not in await other.locator("main").inner_text()


def _console_paths() -> list[tuple[str, str]]:
    found = []
    for router in (pages.router, actions.router, security.router):
        for route in router.routes:
            path = getattr(route, "path", "")
            for method in getattr(route, "methods", ()):
                concrete = path.replace("{", "").replace("}", "")
                found.append((method, concrete))
    return found


async def test_an_agent_key_opens_no_page_and_does_nothing(
    stack: Stack, context: BrowserContext
) -> None:
    page = await context.new_page()
    await page.goto("/console/login")
    await page.fill("input[name=key]", "demo-key")
    await page.click("button[type=submit]")
    assert "Only an operator key" in await page.locator("#error").inner_text()
    assert await context.cookies() == []
    # An agent key presented any other way is no session either: every page and action
    # sends it to the login page, and nothing is done.
    agent = {"Authorization": "Bearer demo-key", "Cookie": "recon_console=demo-key"}
    async with httpx.AsyncClient(base_url=stack.intake_url, headers=agent) as http:
        for method, path in _console_paths():
            if path in ("/console/login",):
                continue
            answer = await http.request(method, path, data={"csrf": "x", "reason": "r"})
            assert answer.status_code == 303, (method, path, answer.status_code)
            assert answer.headers["location"] == "/console/login", (method, path)
    assert (await page.goto("/console")) is not None
    assert page.url.endswith("/console/login")


async def test_every_console_answer_carries_the_content_security_policy(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.intake_url) as http:
        for path in ("/console/login", "/console", "/console/static/console.css"):
            answer = await http.get(path)
            assert "script-src 'self'" in answer.headers["content-security-policy"], path
