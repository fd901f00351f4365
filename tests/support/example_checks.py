"""What both framework examples' tests set up and check at the sandbox provider: one record
to delete, a charge whose response is lost (only recon's lookup can settle it), and the
provider's own call log afterwards."""

from __future__ import annotations

from support.recon_client import Recon


async def seed_record(recon: Recon, record: str) -> None:
    seeded = await recon.http.post(
        f"{recon.sandbox_url}/v1/records",
        json={"resource": record, "data": {"n": 1}, "revision": 1},
    )
    assert seeded.status_code == 201, seeded.text


async def arm_lost_charge(recon: Recon) -> None:
    """The charge is made, its answer never arrives and its webhook is dropped: the agent's
    tool sees no outcome for a while, and only recon's lookup at the provider can settle it."""
    await recon.arm("payments.charge", "lose_response_after_commit")
    await recon.arm("payments.charge", "webhook_drop")


async def assert_one_effect_each(recon: Recon, charge_tx: str) -> None:
    """One charge and one delete reached the provider, whatever the agent replayed; the
    lost charge was settled by recon's lookup (found), not by a second apply."""
    tx = (await recon.get(charge_tx)).json()
    charge = next(o for o in tx["operations"] if o["action"] == "charge")
    calls = await recon.calls(charge["op_key"])
    assert [c["kind"] for c in calls if c["kind"] == "apply"] == ["apply"], calls
    assert any(c["kind"] == "lookup" for c in calls), calls
    every = await recon.calls()
    applied = [c["operation"] for c in every if c["kind"] == "apply"]
    assert sorted(applied) == ["payments.charge", "records.delete"], every
