"""A provider recon has never seen, connected by a file alone (issue 20, acceptance):
docs/examples/acme.toml drives the README transaction (reserve, charge, its compensation,
the receipt) against the Acme fake, with lookups, webhooks in Acme's own shape, drift and
reviews, and no recon code written for Acme.

Real Kafka, Postgres and every recon process (started with RECON_PROVIDER_FILES); the
Acme fake runs in the test's loop, so the test reads its records and arms its faults.
Two providers share the fake: `acme`, the file as shipped (lookup strategy `query`), and
`quiet`, the same file declaring strategy `none` (nothing can be asked).
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from support.acme_fake import API_KEY, Acme, running_acme
from support.acme_targets import ACME_FILE, AcmeTarget, none_text
from support.recon_client import Recon, op, transaction
from support.stack_fixtures import StackWith

from services.config import DEFAULT_WEBHOOK_SECRET

T = TypeVar("T")
OPS = {"Authorization": "Bearer ops-key"}
ADMIN = {"Authorization": "Bearer admin-key"}
WEBHOOK_SECRET = AcmeTarget.secret


def _on(body: dict[str, Any], provider: str) -> dict[str, Any]:
    for step in [*body["steps"], *body.get("on_commit", [])]:
        step["provider"] = provider
    return body


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = 60) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await probe()
        if found:
            return found
        await asyncio.sleep(0.25)
    raise AssertionError(f"not within {timeout}s: {what}")


def _files(tmp_path: Path, url: str) -> str:
    """The shipped file pointed at the fake, and its `none` twin."""
    text = ACME_FILE.read_text(encoding="utf-8").replace("http://127.0.0.1:8095", url)
    acme, quiet = tmp_path / "acme.toml", tmp_path / "quiet.toml"
    acme.write_text(text)
    quiet.write_text(none_text(text))
    return f"acme={acme},quiet={quiet}"


async def test_the_readme_transaction_through_a_provider_file_with_lookups_webhooks_reviews_drift(
    stack_with: StackWith, tmp_path: Path
) -> None:
    async with (
        running_acme(Acme()) as (acme, url),
        stack_with(
            RECON_PROVIDER_FILES=_files(tmp_path, url),
            RECON_PROVIDER_SECRETS=f"acme={API_KEY},quiet={API_KEY}",
            RECON_WEBHOOK_SECRETS=(
                f"sandbox={DEFAULT_WEBHOOK_SECRET},acme={WEBHOOK_SECRET},quiet={WEBHOOK_SECRET}"
            ),
            RECON_ADMIN_KEYS="admin-key=ada",
            RECON_RECONCILE_AFTER_S="1",
            RECON_RECONCILE_INTERVAL_S="1",
            RECON_DRIFT_INTERVAL_S="1",
            RECON_DRIFT_GRACE_S="1",
        ) as (stack, recon),
    ):
        acme.webhook_url = f"{stack.intake_url}/v1/webhooks/acme"
        acme.webhook_secret = WEBHOOK_SECRET
        await _commits(recon, acme)
        await _a_decline_compensates(recon, acme)
        acme.muted = True  # this one is the lookup's to settle
        await _a_lost_answer_is_settled_by_a_lookup(recon, acme)
        acme.muted = False
        acme.webhook_url = f"{stack.intake_url}/v1/webhooks/quiet"
        await _a_signed_webhook_settles_an_unknown_nothing_can_ask_about(recon, acme)
        acme.muted = True  # no webhook will come: only a person can settle it
        await _unknown_at_a_provider_that_cannot_be_asked_goes_to_a_person(recon, acme)
        await _a_stray_effect_is_drift(stack.intake_url, acme)


async def _commits(recon: Recon, acme: Acme) -> None:
    assert (await recon.submit(_on(transaction("acme-1"), "acme"))).status_code == 202
    tx = await recon.wait_terminal("acme-1")
    assert tx["status"] == "committed", tx
    for action, kind in (("reserve", "hold"), ("charge", "payment"), ("receipt", "message")):
        made = acme.under(op(tx, action)["op_key"])
        assert [r["kind"] for r in made] == [kind], (action, made)
        if kind != "message":  # fire and forget: a 202 names nothing
            assert op(tx, action)["remote_id"] == made[0]["ref"]
    charge = acme.under(op(tx, "charge")["op_key"])[0]
    # The payload went where the file maps it, with recon's reference.
    assert charge["details"] == {"amount_cents": 1299, "currency": "usd"}
    assert charge["meta"] == {"recon_ref": op(tx, "charge")["op_key"]}


async def _a_decline_compensates(recon: Recon, acme: Acme) -> None:
    body = _on(transaction("acme-2", customer="cus_decline"), "acme")
    assert (await recon.submit(body)).status_code == 202
    tx = await recon.wait_terminal("acme-2")
    assert tx["status"] == "compensated", tx
    assert op(tx, "charge")["state"] == "failed"
    hold = op(tx, "reserve")["remote_id"]
    # The release went to the hold's own path, named from the reserve's evidence.
    releases = [r for r in acme.records if r["kind"] == "release"]
    assert [r["details"]["hold"] for r in releases] == [hold]
    assert not any(
        r["kind"] == "payment" and r["meta"].get("recon_ref") == op(tx, "charge")["op_key"]
        for r in acme.records
    )


async def _a_lost_answer_is_settled_by_a_lookup(recon: Recon, acme: Acme) -> None:
    acme.lose["payment"] = 1  # the charge is made, its answer lost: unknown
    assert (await recon.submit(_on(transaction("acme-3"), "acme"))).status_code == 202
    tx = await recon.wait_terminal("acme-3")
    assert tx["status"] == "committed", tx
    charge = op(tx, "charge")
    assert [e["outcome"] for e in charge["evidence"]][:2] == ["unknown", "succeeded"]
    assert charge["evidence"][1]["source"] == "lookup"
    assert len(acme.under(charge["op_key"])) == 1  # found, never made twice


async def _a_signed_webhook_settles_an_unknown_nothing_can_ask_about(
    recon: Recon, acme: Acme
) -> None:
    acme.lose["payment"] = 1  # made, its answer lost; Acme's webhook announces it
    assert (await recon.submit(_on(transaction("quiet-0"), "quiet"))).status_code == 202
    tx = await recon.wait_terminal("quiet-0")
    assert tx["status"] == "committed", tx
    charge = op(tx, "charge")
    assert "webhook" in [e["source"] for e in charge["evidence"]], charge["evidence"]
    assert charge["remote_id"] == acme.under(charge["op_key"])[0]["ref"]
    assert len(acme.under(charge["op_key"])) == 1
    assert await recon.open_reviews() == []


async def _unknown_at_a_provider_that_cannot_be_asked_goes_to_a_person(
    recon: Recon, acme: Acme
) -> None:
    acme.lose["payment"] = 1
    assert (await recon.submit(_on(transaction("quiet-1"), "quiet"))).status_code == 202

    async def review() -> dict[str, Any] | None:
        response = await recon.http.get(
            f"{recon.intake_url}/v1/reviews", params={"state": "open"}, headers=recon.headers
        )
        found = [r for r in response.json()["reviews"] if r["tx_id"] == "quiet-1"]
        return found[0] if found else None

    opened = await eventually(review, "quiet-1's charge in review")
    detail = (
        await recon.http.get(f"{recon.intake_url}/v1/reviews/{opened['id']}", headers=recon.headers)
    ).json()
    assert detail["reason"] == "provider_cannot_be_asked", detail
    tx = (await recon.get("quiet-1")).json()
    key = op(tx, "charge")["op_key"]
    # recon never re-sent it and asked nothing: one request under the key, one payment.
    assert len(acme.under(key)) == 1
    resolved = await recon.http.post(
        f"{recon.intake_url}/v1/reviews/{opened['id']}/resolve",
        json={"resolution": "applied", "note": "seen in Acme's dashboard", "actor": "ops@x"},
        headers=OPS,
    )
    assert resolved.status_code == 200, resolved.text
    # manual_review is terminal for wait_terminal: wait for the resolution's commit.
    tx = await recon.wait_until(
        "quiet-1", lambda t: t["status"] == "committed", 60, "quiet-1 not committed"
    )
    assert len(acme.under(key)) == 1


async def _a_stray_effect_is_drift(intake_url: str, acme: Acme) -> None:
    # Someone charged at Acme directly, under a key recon never issued.
    made = {
        "ref": "pay_stray",
        "kind": "payment",
        "phase": "done",
        "request_id": "someone-else",
        "meta": {},
        # Now, as a provider lists what it just made: the scan judges what arrived since its
        # cursor (less the grace), so an effect listed for the first time two minutes after
        # its creation is older than any cursor-less-grace and is not judged (the grace must
        # cover a provider's listing lag, docs/webhooks-reviews-drift.md).
        "created": int(time.time()),
        "details": {"amount_cents": 999},
    }
    acme.records.append(made)

    async def drift() -> list[dict[str, Any]] | None:
        async with httpx.AsyncClient(base_url=intake_url, timeout=10) as client:
            found = (await client.get("/v1/drift", headers=ADMIN)).json()["drift"]
        return [d for d in found if "pay_stray" in str(d)] or None

    found = await eventually(drift, "the stray Acme payment reported as drift")
    assert found[0]["kind"] == "effect_without_intent", found
