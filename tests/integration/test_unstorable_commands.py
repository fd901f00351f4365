"""A request whose text holds a NUL is refused before it reaches the log (422, nothing
changed), whichever route produces its command: Postgres stores no NUL, and the projector
stores every event's text, so an event holding one stopped the projection of its partition,
for every tenant, at every retry (services.intake.produce `storable`). A submission's NUL was
always refused by its first statement; an abort's reason reaches no statement before its
command is produced."""

from support.compensation_support import wait_for
from support.recon_client import Recon, op, transaction
from support.stack_fixtures import module_stack

from services.devtools.stack import Stack
from services.intake.errors import UNSTORABLE_MESSAGE

stack = module_stack


async def test_an_abort_whose_reason_holds_a_nul_is_refused_and_stops_nothing(
    stack: Stack, recon: Recon
) -> None:
    await recon.arm("payments.charge", "delay", delay_ms=1500)
    try:
        assert (await recon.submit(transaction("nul-abort"))).status_code == 202
        await wait_for(recon, "nul-abort", lambda tx: op(tx, "charge")["state"] == "dispatched")

        refused = await recon.abort("nul-abort", {"reason": "why: \u0000", "actor": "agent"})

        assert refused.status_code == 422, refused.text
        assert refused.json() == {"error": "invalid_request", "message": UNSTORABLE_MESSAGE}
        # Nothing was asked: the steps not begun yet still run, and the transaction commits.
        done = await recon.wait_terminal("nul-abort")
        assert done["status"] == "committed", done
        types = [e["type"] for e in await recon.events("nul-abort")]
        assert "TransactionAbortRequested" not in types, types
    finally:
        await recon.disarm()
