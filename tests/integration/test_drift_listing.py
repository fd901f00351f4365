"""The drift scan's listing against the real sandbox: it asks for the window alone, in
pages under the answer bound however long the history, and a listing cut by its page cap
is known as cut (no "confirmed without effect" from it) and counted for an operator.

One stack for the module (support.stack_fixtures.module_stack): each test's scans start
from a fresh deployment's cursors (scans_by_hand), the history and the stray of the first
are forgotten after it (a stray in the window would be the second's drift), and the
first's window listing is judged over the effects made since it started (the second's
transactions are in the window too)."""

from datetime import UTC, datetime, timedelta

from support.drift_scanner import history_and_a_stray, sandbox_of, scanner_settings, scans_by_hand
from support.recon_client import Recon, transaction
from support.stack_fixtures import module_stack

from services.devtools.stack import Stack
from services.metrics import DRIFT_LISTINGS
from services.providers.adapters import SandboxAdapter
from services.pull_reconciler.runtime import open_reconciler

stack = module_stack

# Over the provider client's answer bound (256 KiB) as one list: ~300 bytes an effect.
HISTORY = 1500


def listings(outcome: str) -> float:
    count: float = DRIFT_LISTINGS.labels("sandbox", outcome)._value.get()
    return count


async def test_a_history_past_the_answer_bound_still_shows_the_windows_drift(
    stack: Stack, recon: Recon
) -> None:
    # The whole list once passed the 256 KiB bound at about a thousand effects, and every
    # scan from then on was skipped (a warning a minute): this stray was never found.
    await scans_by_hand(stack)  # this test runs the scans itself
    earlier = {e["id"] for e in await recon.effects()}
    async with history_and_a_stray(stack, recon, HISTORY) as stray:
        await _scans_the_window_alone(stack, stray, earlier)


async def _scans_the_window_alone(stack: Stack, stray: str, earlier: set[str]) -> None:
    async with open_reconciler(scanner_settings(stack, grace_s=0.001)) as reconciler:
        whole = listings("whole")
        found = await reconciler.drift_scan()
        assert [(d.kind.value, d.effect_id) for d in found] == [("effect_without_intent", stray)]
        assert listings("whole") == whole + 1

        # The window alone is read (created_gte): the history is not listed at all.
        window = datetime.now(UTC) - timedelta(days=1)
        listed = await sandbox_of(reconciler).list_effects(since=window)
        assert [e["id"] for e in listed.effects if e["id"] not in earlier] == [stray]
        assert listed.covered_from is None


async def test_a_cut_listing_reports_no_leg_without_effect_and_is_counted(
    stack: Stack, recon: Recon
) -> None:
    await scans_by_hand(stack)
    for tx_id in ("cut-1", "cut-2"):
        assert (await recon.submit(transaction(tx_id, receipt=False))).status_code == 202
    txs = [await recon.wait_terminal(t) for t in ("cut-1", "cut-2")]
    assert [tx["status"] for tx in txs] == ["committed", "committed"]
    async with open_reconciler(scanner_settings(stack, grace_s=0.001)) as reconciler:
        # One page of one effect: the newest alone is listed, every other leg's effect is
        # left out by the cap. Judged as whole, each of those legs was "confirmed without
        # effect"; judged as cut, none is, and the cut is counted.
        sandbox = sandbox_of(reconciler)
        sandbox.max_list_pages, sandbox.list_page = 1, 1
        cut = listings("cut")
        assert await reconciler.drift_scan() == []
        assert listings("cut") == cut + 1

        # Whole (the cut left the cursor where it was, so these legs are judged now): every
        # leg has its effect.
        sandbox.max_list_pages = SandboxAdapter.max_list_pages
        sandbox.list_page = SandboxAdapter.list_page
        assert await reconciler.drift_scan() == []
