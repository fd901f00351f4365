"""The drift scan of a provider described by a file (the `declared` adapter), against the
real sandbox declared by tests/support/sandbox_provider.toml, whose `[listing]` names the
sandbox's creation-time filter (`since_param = "created_gte"`) and its order
(`order = "newest_first"`): the scan asks for its window alone, and a cut listing still
proves the newest legs' effects missing; the same file without those keys is read as
before (a cut covers nothing).

One stack for the module (support.stack_fixtures.module_stack): each test scans from a
fresh deployment's cursors (scans_by_hand) and leaves the sandbox as consistent with
recon as it found it (its history and stray forgotten, its lost charges held again, under
transaction ids of its own), so what the next test's scan finds is only what it made."""

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

from support.drift_scanner import (
    Asked,
    charges_lost_for_the_test,
    history_and_a_stray,
    scanner_settings,
    scans_by_hand,
)
from support.recon_client import Recon
from support.stack_fixtures import module_stack

from events.drift import DriftDetected
from services.config import Settings
from services.devtools.stack import Stack
from services.providers.accounts import Account
from services.providers.declared.adapter import DeclaredAdapter
from services.providers.measured import Measured
from services.pull_reconciler.runtime import Reconciler, open_reconciler

stack = module_stack

SANDBOX_FILE = Path(__file__).resolve().parents[1] / "support" / "sandbox_provider.toml"
TEXT = SANDBOX_FILE.read_text(encoding="utf-8")
NEW_KEYS = 'since_param = "created_gte"\nsince_format = "iso8601"\norder = "newest_first"\n'
HISTORY = 150
# Two pages of one effect: the two newest effects are listed, the older ones left out.
CUT = (
    ('params = { limit = "100" }', 'params = { limit = "1" }'),
    ("max_pages = 100", "max_pages = 2"),
)


def declared(stack: Stack, tmp_path: Path, *edits: tuple[str, str]) -> Settings:
    """A reconciler's settings with the sandbox spoken by its provider file, edited."""
    text = TEXT.replace("http://127.0.0.1:8090", stack.sandbox_url)
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "sandbox.toml"
    path.write_text(text, encoding="utf-8")
    return dataclasses.replace(
        scanner_settings(stack, grace_s=0.001),
        provider_adapters={"sandbox": "declared"},
        provider_files={"sandbox": str(path)},
    )


def asked(reconciler: Reconciler) -> Asked:
    measured = reconciler.accounts.adapters[Account("sandbox")]
    assert isinstance(measured, Measured) and isinstance(measured.inner, DeclaredAdapter)
    measured.inner.http = Asked(measured.inner.http)
    return measured.inner.http


async def test_the_scan_asks_a_declared_provider_for_its_window_alone(
    stack: Stack, recon: Recon, tmp_path: Path
) -> None:
    await scans_by_hand(stack)  # this test runs the scans itself
    # The history is two days old: more than a page of 100, outside the window.
    async with history_and_a_stray(stack, recon, HISTORY) as stray:
        await _asks_for_its_window(stack, tmp_path, stray)


async def _asks_for_its_window(stack: Stack, tmp_path: Path, stray: str) -> None:
    async with open_reconciler(declared(stack, tmp_path)) as reconciler:
        sandbox = asked(reconciler)
        found = await reconciler.drift_scan()
        assert [(d.kind.value, d.effect_id) for d in found] == [("effect_without_intent", stray)]
        # One request, from the window's start (less the grace) on: the history is never
        # listed. Without `since_param` the scan pages through all 151 effects.
        assert len(sandbox.params) == 1, sandbox.params
        assert set(sandbox.params[0]) == {"limit", "created_gte"}
        since = datetime.fromisoformat(sandbox.params[0]["created_gte"])
        window = timedelta(seconds=reconciler.settings.reconciler.drift_window_s)
        assert abs(since - (datetime.now(UTC) - window)) < timedelta(minutes=1)


async def _scan_with_missing_effects(
    stack: Stack, recon: Recon, settings: Settings, tag: str
) -> tuple[list[DriftDetected], dict[str, str]]:
    """Three committed transactions (ids ending in `tag`), then the charges of the first
    and the last lose their effect at the sandbox until the test's scan is done; the scan's
    findings, and the op keys of those two charges."""
    await scans_by_hand(stack)
    async with (
        charges_lost_for_the_test(stack, recon, tag) as charges,
        open_reconciler(settings) as reconciler,
    ):
        return await reconciler.drift_scan(), charges


async def test_a_cut_newest_first_listing_still_proves_the_newest_legs_effects_missing(
    stack: Stack, recon: Recon, tmp_path: Path
) -> None:
    settings = declared(stack, tmp_path, *CUT)
    found, charges = await _scan_with_missing_effects(stack, recon, settings, "-newest-first")
    # Listed: the new reserve and the middle charge; the cut covers from the latter on, so
    # the new charge's missing effect is found, and the old one's (before the cut, maybe
    # among the effects left out) is not judged.
    assert [(d.kind.value, d.op_key) for d in found] == [("intent_without_effect", charges["new"])]


async def test_a_file_that_declares_no_order_covers_nothing_when_cut(
    stack: Stack, recon: Recon, tmp_path: Path
) -> None:
    # The file as written before these keys existed: the effects a cut leaves out may be
    # any age, so no leg's effect is proven missing, not even the newest one's.
    settings = declared(stack, tmp_path, *CUT, (NEW_KEYS, ""))
    found, _ = await _scan_with_missing_effects(stack, recon, settings, "-no-order")
    assert found == []
