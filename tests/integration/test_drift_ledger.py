"""The drift scan's ledger (reconcilers.store.ledger) read from a real projection: a leg is
confirmed by its own state, not by the operation's summary. An operation whose undo is
in review shows `manual_review`, but its forward effect was confirmed before the undo was
sent: a provider that lost that effect is drift."""

from datetime import timedelta

import asyncpg
from support.txbuilders import T0, compensate, log_of, observed, plan, request_review, submit

from events.definition import Leg
from events.drift import DriftKind
from events.inputs import Outcome
from events.keys import compensation_key
from projections.writer import project_batch
from reconcilers.drift import Effect, compare, first_covered
from reconcilers.store import ledger


async def test_a_step_whose_undo_is_in_review_is_held_confirmed(conn: asyncpg.Connection) -> None:
    # The charge is refused, the confirmed reserve is undone, the undo's answer is lost and
    # its lookups run out: the reserve shows `manual_review`, its forward leg confirmed.
    log = log_of(
        submit(["reserve", "charge"]),
        observed("reserve", 1, Outcome.SUCCEEDED, n=0),
        observed("charge", 1, Outcome.REJECTED, n=1),
        plan("reserve"),
        compensate("reserve"),
        observed("reserve", 1, Outcome.UNKNOWN, n=2, leg=Leg.COMPENSATION),
        request_review("reserve", 1, Leg.COMPENSATION),
    )
    await project_batch(conn, "recon.events", [(0, i, env) for i, env in enumerate(log)])
    row = await conn.fetchrow(
        "SELECT op_key, state, comp_state FROM operations WHERE action = 'reserve'"
    )
    assert row is not None
    assert (row["state"], row["comp_state"]) == ("manual_review", "manual_review")
    reserve = row["op_key"]

    day_before = T0 - timedelta(days=1)
    entries = {e.op_key: e for e in await ledger(conn, day_before, "sandbox", [], day_before)}
    held = {key: (e.leg, e.confirmed, e.failed) for key, e in entries.items()}
    assert held[reserve] == (Leg.FORWARD, True, False)
    assert held[compensation_key(reserve)] == (Leg.COMPENSATION, False, False)
    assert [e.failed for e in entries.values() if e.action == "charge"] == [True]

    # A provider that lists the undo's effect but lost the reserve's: drift.
    undo = Effect(
        id="eff_undo",
        operation=entries[compensation_key(reserve)].operation,
        idempotency_key=compensation_key(reserve),
        payload=entries[compensation_key(reserve)].payload,
        created_at=T0,
    )
    found = compare(
        provider="sandbox",
        effects=[undo],
        ledger=list(entries.values()),
        known_keys=set(entries),
        now=T0 + timedelta(hours=1),
        window_start=T0 - timedelta(days=1),
        grace=timedelta(seconds=60),
    )
    assert [(d.kind, d.op_key) for d in found] == [(DriftKind.INTENT_WITHOUT_EFFECT, reserve)]


async def test_a_scan_reads_only_the_legs_its_listing_can_judge(conn: asyncpg.Connection) -> None:
    """Not the whole window at every scan: the legs under a listed key (their effects are
    compared) and those dispatched from the first instant a cut listing covers (their
    missing effects are proved), nothing under another provider or, for a tenant's own
    account, another tenant; and the same findings."""
    # Every reserve is dispatched at T0, each charge when its reserve is confirmed.
    charged_at = {"tx-0": 60, "tx-1": 600, "tx-2": 1200}
    offset = 0
    for tx_id, n in charged_at.items():
        log = log_of(
            submit(["reserve", "charge"], tx_id=tx_id),
            observed("reserve", 1, Outcome.SUCCEEDED, n=n, tx_id=tx_id),
            observed("charge", 1, Outcome.SUCCEEDED, n=n + 5, tx_id=tx_id),
            tx_id=tx_id,
        )
        await project_batch(
            conn, "recon.events", [(0, offset + i, env) for i, env in enumerate(log)]
        )
        offset += len(log)
    window, grace = T0 - timedelta(days=1), timedelta(seconds=60)
    every = await ledger(conn, window, "sandbox", [], window)
    assert len(every) == 6 and all(e.confirmed for e in every)
    [early] = [e for e in every if (e.tx_id, e.action) == ("tx-0", "charge")]
    cut_at = T0 + timedelta(minutes=15)  # the oldest effect a cut listing holds

    covered = first_covered(cut_at, grace, window)
    judged = await ledger(conn, window, "sandbox", [early.op_key], covered)
    assert sorted((e.tx_id, e.action) for e in judged) == [("tx-0", "charge"), ("tx-2", "charge")]
    assert await ledger(conn, window, "stripe", [early.op_key], window) == []
    # A tenant's own account is judged on that tenant's legs alone.
    assert await ledger(conn, window, "sandbox", [early.op_key], window, "acme") == []
    assert len(await ledger(conn, window, "sandbox", [], window, "demo")) == 6

    listed = [
        Effect(
            id="eff_early",
            operation=early.operation,
            idempotency_key=early.op_key,
            payload=early.payload,
            created_at=early.dispatched_at,
        )
    ]
    found = [
        compare(
            provider="sandbox",
            effects=listed,
            ledger=read,
            known_keys={e.op_key for e in every},
            now=T0 + timedelta(hours=1),
            window_start=window,
            grace=grace,
            covered_from=cut_at,
        )
        for read in (every, judged)
    ]
    assert found[0] == found[1]
    assert [(d.kind, d.tx_id, d.action) for d in found[1]] == [
        (DriftKind.INTENT_WITHOUT_EFFECT, "tx-2", "charge")
    ]
