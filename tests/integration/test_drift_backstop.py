"""The drift backstop against the real sandbox, Postgres and Kafka: a scan with `full`
(every RECON_DRIFT_BACKSTOP_EVERY-th scheduled scan, `drift --scan --full`) judges each
account's whole window, cursors aside, and finds what the incremental scans judged once
and passed over; it reports each finding once. Over a whole listing it moves the cursor on
(forward only), as it judged all an incremental span would have: a fresh deployment's
second scan is incremental. A cut or unavailable listing moves none.

The scans' clock is set, not waited for (a 60 s grace): each scan a grace and more after
the last, so the cursor lies past what the test makes afterwards.

One stack for the module (support.stack_fixtures.module_stack) but the cut listing's test,
which lists the window's newest effects and so would list the other tests' transactions:
it starts its own. Each other test scans from a fresh deployment's cursors (scans_by_hand)
and leaves the sandbox as consistent with recon as it found it (its history, tagged with
its own ids, forgotten; the charge applied after failure forgotten too, the faults it
armed disarmed), so a backstop over the whole window finds only what its test made."""

from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from support.decider_support import eventually
from support.drift_scanner import (
    asked,
    cursor,
    forget_effects,
    history_id,
    lose_effects,
    old_history,
    sandbox_of,
    scanner_settings,
    scans_by_hand,
)
from support.recon_client import Recon, op, transaction
from support.review_requests import request_review
from support.stack_fixtures import StackWith, module_stack
from support.topic_records import read_topic

from events.drift import DriftDetected
from events.topics import Topics
from reconcilers import store
from services.devtools.stack import Stack
from services.providers.adapters import SandboxAdapter
from services.pull_reconciler.runtime import Reconciler, open_reconciler

stack = module_stack
pytestmark = pytest.mark.usefixtures("disarmed")

GRACE = timedelta(seconds=60)
OPS = {"Authorization": "Bearer ops-key"}


async def scan_at(scanner: Reconciler, at: datetime, *, full: bool = False) -> list[DriftDetected]:
    scanner.clock = lambda: at
    return await scanner.drift_scan(full=full)


async def reported(stack: Stack) -> Counter[str]:
    """How many records recon.drift holds under each drift id."""
    records = await read_topic(stack.kafka_bootstrap, Topics(stack.topic_prefix).drift)
    return Counter(r["drift_id"] for r in records)


async def test_the_backstop_finds_an_effect_listed_after_the_cursor_passed_it_once(
    stack: Stack, recon: Recon
) -> None:
    await scans_by_hand(stack)  # this test runs the scans itself
    late = history_id(0, "late")
    try:
        await _the_backstop_finds_it(stack, late)
    finally:
        forget_effects(stack, [late])


async def _the_backstop_finds_it(stack: Stack, late: str) -> None:
    start = datetime.now(UTC)
    async with open_reconciler(scanner_settings(stack, grace_s=GRACE.total_seconds())) as scanner:
        await scan_at(scanner, start + 10 * GRACE)  # the cursor: start + 9 graces
        # An effect the provider lists only now, created (by its clock) before the cursor:
        # as a provider whose listing lags, or whose clock runs behind recon's. Written into
        # the sandbox's store, so no webhook reports it first.
        old_history(stack, 1, ago=timedelta(0), tag="late")

        incremental = await scan_at(scanner, start + 12 * GRACE)
        assert late not in {d.effect_id for d in incremental}  # behind the cursor
        moved_to = await cursor(stack)
        assert moved_to == start + 11 * GRACE

        found = await scan_at(scanner, start + 13 * GRACE, full=True)
        [drift] = [d for d in found if d.effect_id == late]
        assert drift.kind.value == "effect_without_intent"
        # Its listing whole, the backstop moves the cursor on to its own judged_to.
        assert await cursor(stack) == start + 12 * GRACE

        # The next backstop finds it again and reports it no second time.
        again = await scan_at(scanner, start + 14 * GRACE, full=True)
        assert drift.drift_id in {d.drift_id for d in again}
        assert (await reported(stack))[drift.drift_id] == 1
        assert await cursor(stack) == start + 13 * GRACE


async def test_a_charge_resolved_not_applied_after_its_effect_was_judged_is_reported_once(
    stack: Stack, recon: Recon
) -> None:
    """A person resolves a review `not_applied` while the provider had applied the charge:
    the mistake drift exists to show. The incremental scan judged the charge's effect while
    the leg was unknown (no drift then), so it never looks at it again; the backstop does."""
    await scans_by_hand(stack)
    try:
        await _resolved_not_applied(stack, recon)
    finally:
        # The charge's effect forgotten: its leg failed, so the module's later backstops
        # would report it too.
        answer = await recon.get("bk-1")
        if answer.status_code == 200:
            lose_effects(stack, op(answer.json(), "charge")["op_key"])


async def _resolved_not_applied(stack: Stack, recon: Recon) -> None:
    # A charge whose outcome nothing can learn: the response is lost, the lookups fail and
    # the webhook never comes; the sandbox applied it all the same.
    await recon.arm("payments.charge", "lookup_unavailable", times=1000)
    await recon.arm("payments.charge", "lose_response_after_commit")
    await recon.arm("payments.charge", "webhook_drop")
    assert (await recon.submit(transaction("bk-1"))).status_code == 202

    async def charge_unknown() -> bool | None:
        response = await recon.get("bk-1")
        if response.status_code != 200:
            return None
        charge = op(response.json(), "charge")
        lookups = [e for e in charge["evidence"] if e["source"] == "lookup"]
        return True if charge["state"] == "unknown" and lookups else None

    await eventually(charge_unknown, "bk-1: charge unknown, lookups failed")
    await request_review(stack, "bk-1")

    async def review_open() -> str | None:
        response = await recon.http.get(
            f"{recon.intake_url}/v1/reviews", params={"state": "open"}, headers=recon.headers
        )
        found = [r["id"] for r in response.json()["reviews"] if r["tx_id"] == "bk-1"]
        return found[0] if found else None

    review = await eventually(review_open, "bk-1: review open")
    charge_key = op((await recon.get("bk-1")).json(), "charge")["op_key"]

    start = datetime.now(UTC)
    async with open_reconciler(scanner_settings(stack, grace_s=GRACE.total_seconds())) as scanner:
        # The charge's effect is judged while its leg is unknown: nothing to report.
        first = await scan_at(scanner, start + 10 * GRACE)
        assert [d for d in first if d.op_key == charge_key] == []

        resolved = await recon.http.post(
            f"{recon.intake_url}/v1/reviews/{review}/resolve",
            json={"resolution": "not_applied", "note": "no such charge", "actor": "ops@x"},
            headers=OPS,
        )
        assert resolved.status_code == 200, resolved.text

        async def charge_failed() -> dict[str, Any] | None:
            tx: dict[str, Any] = (await recon.get("bk-1")).json()
            return tx if op(tx, "charge")["state"] == "failed" else None

        await eventually(charge_failed, "bk-1: charge failed")

        # Judged once: the incremental scan does not look at the effect again.
        incremental = await scan_at(scanner, start + 12 * GRACE)
        assert [d for d in incremental if d.op_key == charge_key] == []

        found = await scan_at(scanner, start + 13 * GRACE, full=True)
        [drift] = [d for d in found if d.op_key == charge_key]
        assert (drift.kind.value, drift.tx_id, drift.action) == (
            "effect_after_failure",
            "bk-1",
            "charge",
        )
        assert await cursor(stack) == start + 12 * GRACE

        again = await scan_at(scanner, start + 14 * GRACE, full=True)
        assert drift.drift_id in {d.drift_id for d in again}
        assert (await reported(stack))[drift.drift_id] == 1


# In the window, three pages of 100: what a whole-window listing of the account pages through.
IN_WINDOW = 250


async def test_a_fresh_deployments_backstop_sets_the_cursor_so_its_next_scan_is_incremental(
    stack: Stack, recon: Recon
) -> None:
    """A reconciler's first scan is a backstop. It used to set no cursor, so the second
    scan, finding none, read the whole window again."""
    await scans_by_hand(stack)
    old_history(stack, IN_WINDOW, ago=timedelta(minutes=30), tag="fresh")
    try:
        await _sets_the_cursor(stack)
    finally:
        forget_effects(stack, [history_id(i, "fresh") for i in range(IN_WINDOW)])


async def _sets_the_cursor(stack: Stack) -> None:
    grace = timedelta(seconds=1)
    async with open_reconciler(scanner_settings(stack, grace_s=grace.total_seconds())) as scanner:
        sandbox = asked(scanner)
        assert await cursor(stack) is None
        first = await scanner.scheduled_drift_scan()  # the process's first: a backstop
        assert len(first) == IN_WINDOW
        assert len(sandbox.params) == 3, sandbox.params  # the whole window
        judged_to = await cursor(stack)
        assert judged_to is not None

        sandbox.params.clear()
        assert await scanner.scheduled_drift_scan() == []
        # Incremental: one page from the cursor less the grace, none of the 250.
        assert len(sandbox.params) == 1, sandbox.params
        assert datetime.fromisoformat(sandbox.params[0]["created_gte"]) == judged_to - grace


async def test_a_backstop_over_a_cut_or_unavailable_listing_moves_no_cursor(
    stack_with: StackWith, free_port: Callable[[], int]
) -> None:
    """Only a whole listing judged every leg of the span: a cut one proves no absence
    before its cut, an unavailable one nothing. (A cut one of an adapter that lists below
    an instant moves it and keeps the rest as a hole: tests/integration/test_drift_hole.py.)
    On a stack of its own: its cut lists the window's two newest effects, which on the
    module's stack would be the other tests' (consistent, so nothing found)."""
    async with stack_with() as (stack, _):
        await _moves_no_cursor(stack, free_port)


async def _moves_no_cursor(stack: Stack, free_port: Callable[[], int]) -> None:
    await scans_by_hand(stack)
    old_history(stack, 5, ago=timedelta(minutes=30))
    async with open_reconciler(scanner_settings(stack, grace_s=0.001)) as scanner:
        sandbox = sandbox_of(scanner)
        sandbox.max_list_pages, sandbox.list_page = 1, 2  # two of five listed: cut
        sandbox.lists_until = False
        cut = await scanner.drift_scan(full=True)
        assert len(cut) == 2
        assert await cursor(stack) is None

        sandbox.max_list_pages = SandboxAdapter.max_list_pages
        sandbox.list_page = SandboxAdapter.list_page
        url, sandbox.base_url = sandbox.base_url, f"http://127.0.0.1:{free_port()}"  # nobody
        assert await scanner.drift_scan(full=True) == []
        assert await cursor(stack) is None

        sandbox.base_url = url
        whole = await scanner.drift_scan(full=True)
        assert len(whole) == 5
        assert await cursor(stack) is not None


async def test_a_backstop_forgets_the_cursors_of_accounts_no_longer_configured(
    stack: Stack, recon: Recon
) -> None:
    """A cursor of an account no longer configured (a retired provider, a tenant's own
    account removed) is deleted by the next backstop, not kept for ever; an incremental
    scan leaves it (it reads only the accounts it scans)."""
    await scans_by_hand(stack)
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    shared, retired, own = ("sandbox", None), ("retired", None), ("sandbox", "acme")
    conn = await asyncpg.connect(stack.database_url)
    try:
        await store.advance_drift_cursors(conn, [(retired, hour_ago), (own, hour_ago)], hour_ago)
        async with open_reconciler(scanner_settings(stack, grace_s=0.001)) as scanner:
            await scanner.drift_scan()
            assert set(await store.drift_cursors(conn)) == {shared, retired, own}

            await scanner.drift_scan(full=True)
            assert set(await store.drift_cursors(conn)) == {shared}
    finally:
        await conn.close()
