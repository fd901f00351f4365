"""A crash between the two steps of a natural-key claim (services.intake.natural_keys): the
intake dies after its Postgres transaction claimed the intent's tx_id and natural key and
before the SubmitTransaction was produced (the crash point `intake.after_claim`, an exit like
kill -9). Nothing was promised, so the key must neither be lost for good nor let the same
business intent through twice: a re-planned submission under another tx_id waits
(`intent_pending`) until the pending horizon has passed, then takes the key and runs once;
the crashed tx_id's own retry is then the duplicate. Counted at the provider. Real stack.
"""

from __future__ import annotations

import asyncio
import copy
import time
from typing import Any

import httpx
import pytest
from support.crash_support import until_listening
from support.stack_fixtures import StackWith

from services.crash_points import CRASH_ENV, INTAKE_AFTER_CLAIM
from services.intake.example import example_transaction

HORIZON_S = 60  # the shortest the configuration allows (services.config)


def planned(tx_id: str) -> dict[str, Any]:
    body = copy.deepcopy(example_transaction(tx_id))
    body["steps"][1]["natural_key"] = "order-crash"
    return body


async def test_a_crash_between_claim_and_produce_loses_no_intent_and_doubles_none(
    stack_with: StackWith,
) -> None:
    async with stack_with(RECON_PENDING_HORIZON_S=str(HORIZON_S)) as (stack, recon):
        stack.stop("intake")
        stack.extra_env[CRASH_ENV] = INTAKE_AFTER_CLAIM
        try:
            stack.start("intake")
            await until_listening(recon)
            with pytest.raises(httpx.HTTPError):
                await recon.submit(planned("crashed"))
            assert stack.processes["intake"].wait(timeout=10) == 137
        finally:
            del stack.extra_env[CRASH_ENV]
        stack.processes.pop("intake")
        stack.start("intake")
        await stack.wait_ready()
        claimed_at = time.monotonic()

        early = await recon.submit(planned("replanned"))
        assert early.status_code == 409 and early.json()["error"] == "intent_pending", early.text
        assert (await recon.get("crashed")).status_code == 404

        # Past the horizon the crashed claim never landed: the re-plan takes the key.
        while True:
            taken = await recon.submit(planned("replanned"))
            if taken.status_code == 202 or time.monotonic() - claimed_at > HORIZON_S + 60:
                break
            assert taken.json()["error"] == "intent_pending", taken.text
            await asyncio.sleep(2)
        assert taken.status_code == 202, taken.text
        assert (await recon.wait_terminal("replanned"))["status"] == "committed"

        late = await recon.submit(planned("crashed"))
        assert late.status_code == 409, late.text
        assert late.json()["error"] == "duplicate_intent"
        assert late.json()["duplicate_of"]["tx_id"] == "replanned"
        charges = [
            c
            for c in await recon.calls()
            if c["kind"] == "apply" and c["operation"] == "payments.charge"
        ]
        assert len(charges) == 1, charges
