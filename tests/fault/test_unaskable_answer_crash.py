"""A decider killed while the answer of a call to a provider that cannot be asked would be
staged.

Group commit (services.decider.group_commit) holds a notification's confirmation in memory
for the partition's next Kafka transaction, and a crash forgets it. The answer of a call the
decider made itself is in no topic: the next owner finds the notification begun and
unanswered, and can only look it up. A provider whose lookup strategy is `none` says
nothing, so the notification would go to a person, though it was sent and answered. Such an
answer is never staged (DispatchHost._unaskable).

The README transaction runs through `quiet` (docs/examples/acme.toml declaring `none`) with
the Acme fake sending no webhooks, so the receipt's answer is the only decision that could
be staged. The decider is armed to hold at the moment one is; if it ever does, it is killed
there and started again. Either way the receipt must end confirmed, made once, with no
review.
"""

import asyncio
import time
from pathlib import Path
from typing import Any

from support.acme_fake import API_KEY, Acme, running_acme
from support.acme_targets import ACME_FILE, none_text
from support.crash_support import start_paused_at
from support.recon_client import Recon, op, transaction
from support.stack_fixtures import StackWith

from services.crash_points import DECIDER_WITH_STAGED_INPUTS

TX = "unaskable-1"
# Settled one way or the other: confirmed, or left for a lookup and a person.
SETTLED = {"confirmed", "failed", "unknown", "manual_review"}


async def _receipt(recon: Recon) -> dict[str, Any] | None:
    response = await recon.get(TX)
    if response.status_code != 200:
        return None
    tx: dict[str, Any] = response.json()
    return tx if any(o["action"] == "receipt" for o in tx["operations"]) else None


async def test_a_notification_answer_of_a_provider_that_cannot_be_asked_survives_a_crash(
    stack_with: StackWith, tmp_path: Path
) -> None:
    marker = tmp_path / "paused"
    quiet = tmp_path / "quiet.toml"
    async with running_acme(Acme()) as (acme, url):
        text = ACME_FILE.read_text(encoding="utf-8").replace("http://127.0.0.1:8095", url)
        quiet.write_text(none_text(text))
        async with stack_with(
            RECON_PROVIDER_FILES=f"quiet={quiet}",
            RECON_PROVIDER_SECRETS=f"quiet={API_KEY}",
            # A lookup and a review come once a step has waited 15 s, if they come: the test
            # waits for either. Not sooner: the reconciler looks up every step in flight
            # longer than this, and on a loaded machine (CI) its review request for a charge
            # still on the wire was the decision staged; the decider was killed there, and the
            # charge, begun and unanswered at a provider that cannot be asked, went to a
            # person: not the crash this test is for.
            RECON_RECONCILE_AFTER_S="15",
            RECON_RECONCILE_INTERVAL_S="1",
        ) as (stack, recon):
            start_paused_at(stack, "decider", DECIDER_WITH_STAGED_INPUTS, marker)
            body = transaction(TX)
            for step in [*body["steps"], *body.get("on_commit", [])]:
                step["provider"] = "quiet"
            assert (await recon.submit(body)).status_code == 202

            held = False
            tx = None
            deadline = time.monotonic() + 90
            while True:
                last = op(tx, "receipt") if tx else None
                assert time.monotonic() < deadline, f"the receipt never settled: {last}"
                if not held and marker.exists():
                    # The answer staged, in memory only: the crash the rule is for.
                    held = True
                    stack.kill("decider")
                    stack.start("decider")
                tx = await _receipt(recon)
                if tx is not None and op(tx, "receipt")["state"] in SETTLED:
                    break
                await asyncio.sleep(0.2)

            receipt = op(tx, "receipt")
            assert receipt["state"] == "confirmed", receipt
            assert [r["kind"] for r in acme.under(receipt["op_key"])] == ["message"]
            assert [r for r in await recon.open_reviews() if r.get("tx_id") == TX] == []
            # And the decider never held the answer back for a crash to lose.
            assert not held
