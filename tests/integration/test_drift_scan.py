"""The drift scan against the real provider, Postgres and Kafka: each kind is found and
reported once on recon.drift, however many scans run."""

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import asyncpg
from prometheus_client import REGISTRY
from support.drift_scanner import scanner_settings, scans_by_hand
from support.recon_client import Recon, effects_for, op, transaction
from support.topic_records import read_topic

from events.topics import Topics
from services.devtools.infra._process import REPO_ROOT
from services.devtools.stack import Stack
from services.providers.accounts import Account
from services.pull_reconciler.runtime import open_reconciler


async def test_each_drift_kind_is_reported_once(stack: Stack, recon: Recon) -> None:
    await scans_by_hand(stack)  # this test runs the scans itself
    for tx_id in ("drift-1", "drift-2"):
        assert (await recon.submit(transaction(tx_id, receipt=False))).status_code == 202
    txs = [await recon.wait_terminal(t) for t in ("drift-1", "drift-2")]
    assert [tx["status"] for tx in txs] == ["committed", "committed"]
    stray_id = (await _unrecorded_charge(stack, recon, 500))["id"]

    async with open_reconciler(scanner_settings(stack, grace_s=0.001)) as reconciler:
        # The real provider: only the stray effect is drift.
        found = await reconciler.drift_scan()
        assert [(d.kind.value, d.effect_id) for d in found] == [("effect_without_intent", stray_id)]
        assert found[0].detail["payload"]["amount"] == 500

        # What a provider that lost one charge and altered another would list.
        effects: list[Any] = await recon.effects()
        lost = op(txs[0], "charge")["op_key"]
        altered = op(txs[1], "charge")["op_key"]
        [altered_effect] = effects_for(effects, altered)
        listed = [
            {**e, "payload": {**e["payload"], "amount": 1300}}
            if e["idempotency_key"] == altered
            else e
            for e in effects
            if e["idempotency_key"] != lost
        ]
        for _ in range(2):  # a second scan finds the same drift and reports nothing new
            found = await reconciler.drift_scan({Account("sandbox"): listed})
            kinds = {d.kind.value: d for d in found}
            assert sorted(kinds) == ["effect_without_intent", "intent_without_effect", "mismatch"]
            assert kinds["intent_without_effect"].op_key == lost
            assert kinds["intent_without_effect"].tx_id == "drift-1"
            mismatch = kinds["mismatch"]
            assert (mismatch.op_key, mismatch.effect_id) == (altered, altered_effect["id"])
            assert mismatch.detail["amount"] == {"recon": 1299, "provider": 1300}

    # The CLI's scan starts from the cursor the first scan left (a listing given by hand
    # moves none): the first stray effect was judged, a second one made since is found.
    second_id = (await _unrecorded_charge(stack, recon, 600))["id"]
    env = {**stack.env(), "RECON_DRIFT_GRACE_S": "0.001"}
    scan = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "services.cli", "drift", "--scan"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert scan.returncode == 0, scan.stderr
    assert "drift scan: 1 finding(s)" in scan.stdout, scan.stdout
    assert second_id in scan.stdout and stray_id not in scan.stdout

    # Several reporters may name one drift (the webhook ingress reports the stray effects
    # too, under the same ids); what was found is four drifts, each under one id.
    reported = await read_topic(stack.kafka_bootstrap, Topics(stack.topic_prefix).drift)
    kinds_by_id = {r["drift_id"]: r["kind"] for r in reported}
    assert sorted(kinds_by_id.values()) == [
        "effect_without_intent",
        "effect_without_intent",
        "intent_without_effect",
        "mismatch",
    ]
    counts = Counter(r["drift_id"] for r in reported)
    assert all(n == 1 for i, n in counts.items() if kinds_by_id[i] != "effect_without_intent")

    # The projection keeps one row per drift.
    conn = await asyncpg.connect(stack.database_url)
    try:
        deadline = time.monotonic() + 20
        while True:
            rows = await conn.fetch("SELECT drift_id FROM drift")
            if len(rows) >= 4 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
    finally:
        await conn.close()
    assert sorted(r["drift_id"] for r in rows) == sorted(kinds_by_id)

    shown = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "services.cli", "drift"],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    # The drift table is the projector's; whether it has caught up yet is its business.
    assert shown.returncode == 0, shown.stderr


async def test_an_effect_whose_intent_is_not_projected_yet_is_not_reported_as_drift(
    stack: Stack, recon: Recon
) -> None:
    # A stopped projector is the slowest projector: the provider holds the effects, the
    # intake holds the intents, and the projections know nothing of either.
    await scans_by_hand(stack)
    stack.stop("projector")
    assert (await recon.submit(transaction("slow-1", receipt=False))).status_code == 202
    deadline = time.monotonic() + 30
    while len(effects := await recon.effects()) < 2:
        assert time.monotonic() < deadline, effects
        await asyncio.sleep(0.2)
    conn = await asyncpg.connect(stack.database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM operations") == 0
        assert await conn.fetchval("SELECT count(*) FROM events") == 0
    finally:
        await conn.close()

    async with open_reconciler(scanner_settings(stack, grace_s=0.001)) as reconciler:
        assert await reconciler.drift_scan() == []

        # An effect no intent asked for, seconds old: within the grace period it is not
        # reported yet; past it, it is.
        stray = await recon.http.post(
            f"{stack.sandbox_url}/v1/effects/unrecorded",
            json={"operation": "payments.charge", "payload": {"amount": 5, "currency": "usd"}},
        )
        assert stray.status_code == 200, stray.text
        reconciler.settings = scanner_settings(stack, grace_s=3600)
        assert await reconciler.drift_scan() == []
        reconciler.settings = scanner_settings(stack, grace_s=0.001)
        found = await reconciler.drift_scan()
        assert [(d.kind.value, d.effect_id) for d in found] == [
            ("effect_without_intent", stray.json()["id"])
        ]


async def test_an_effect_under_a_failed_charge_is_reported_as_effect_after_failure(
    stack: Stack, recon: Recon
) -> None:
    await scans_by_hand(stack)
    body = transaction("paid-1", customer="cus_decline", receipt=False)
    assert (await recon.submit(body)).status_code == 202
    tx = await recon.wait_terminal("paid-1")
    assert tx["status"] == "compensated"
    charge = op(tx, "charge")
    assert charge["state"] == "failed"
    effects: list[Any] = await recon.effects()
    assert effects_for(effects, charge["op_key"]) == []

    # What a provider that answered 402 and charged anyway would list.
    [reserve_effect] = effects_for(effects, op(tx, "reserve")["op_key"])
    paid = {
        **reserve_effect,
        "id": "ch_paid_after_all",
        "operation": "payments.charge",
        "idempotency_key": charge["op_key"],
        "payload": {"amount": 1299, "currency": "usd", "customer": "cus_decline"},
    }
    async with open_reconciler(scanner_settings(stack, grace_s=0.001)) as reconciler:
        found = await reconciler.drift_scan({Account("sandbox"): [*effects, paid]})
    # The reserve and its release both have their effects: a compensated step is no drift.
    assert [(d.kind.value, d.effect_id, d.tx_id, d.action, d.op_key) for d in found] == [
        ("effect_after_failure", "ch_paid_after_all", "paid-1", "charge", charge["op_key"])
    ]
    assert found[0].tenant == "demo"
    assert found[0].detail["provider"]["payload"]["amount"] == 1299


async def test_an_unreadable_listing_skips_its_account_alone(stack: Stack, recon: Recon) -> None:
    """One item that is not an effect (here a time without a zone: inside or outside the
    window is a guess) stops the comparison of its account only, counted as `unreadable`;
    the other accounts are compared in the same scan."""
    await scans_by_hand(stack)
    stray = await _unrecorded_charge(stack, recon, 700)
    listed: list[Any] = await recon.effects()
    naive = {**stray, "id": "ch_naive", "created_at": "2026-12-05T10:00:00"}
    # "acme/sandbox" sorts before "sandbox": the unreadable account is scanned first.
    listings: dict[Account, list[object]] = {
        Account("sandbox", "acme"): [naive],
        Account("sandbox"): list(listed),
    }

    def unreadable() -> float:
        sample = REGISTRY.get_sample_value(
            "recon_drift_listings_total", {"provider": "sandbox", "outcome": "unreadable"}
        )
        return sample or 0.0

    before = unreadable()
    async with open_reconciler(scanner_settings(stack, grace_s=0.001)) as reconciler:
        found = await reconciler.drift_scan(listings)
    assert unreadable() == before + 1
    assert [(d.kind.value, d.tenant) for d in found if d.effect_id == stray["id"]] == [
        ("effect_without_intent", None)
    ]
    assert all(d.tenant != "acme" for d in found)


async def _unrecorded_charge(stack: Stack, recon: Recon, amount: int) -> dict[str, Any]:
    """An effect made at the provider behind recon's back (no intent issued its key)."""
    made = await recon.http.post(
        f"{stack.sandbox_url}/v1/effects/unrecorded",
        json={
            "operation": "payments.charge",
            "payload": {"amount": amount, "currency": "usd", "customer": "cus_9"},
        },
    )
    assert made.status_code == 200, made.text
    effect: dict[str, Any] = made.json()
    return effect
