"""The Python SDK (sdk/recon_sdk) against the real stack: typed submission, waiting,
reads, typed refusals carrying the API's `error` code, and resending only what is
idempotent (a submission survives the intake being down; an abort is not resent)."""

import asyncio
import contextlib
import io
import re

import httpx
import pytest
from recon_sdk import (
    TERMINAL,
    AsyncRecon,
    Conflict,
    Forbidden,
    NotFound,
    Recon,
    TransactionRequest,
    Unauthorized,
    Unavailable,
    ops,
)

from events.keys import op_key
from services.devtools.infra._process import REPO_ROOT
from services.devtools.stack import Stack


def order(tx_id: str, customer: str = "cus_1") -> TransactionRequest:
    return ops.transaction(
        tx_id,
        "agent-7",
        [ops.reserve("sku-1"), ops.charge(1299, "usd", customer)],
        on_commit=[ops.send_email("a@example.com", "receipt", action="receipt")],
    )


async def test_sdk_commits_refuses_with_typed_errors_and_resends_only_submissions(
    stack: Stack,
) -> None:
    async with AsyncRecon(stack.intake_url, api_key="demo-key") as recon:
        accepted = await recon.submit(order("sdk-1"))
        assert [o.action for o in accepted.operations] == ["reserve", "charge", "receipt"]
        # The same intent again is the same transaction (the retry the SDK relies on).
        again = await recon.submit(order("sdk-1"))
        assert again.operations == accepted.operations
        with pytest.raises(Conflict) as conflict:
            await recon.submit(order("sdk-1", customer="cus_2"))
        assert conflict.value.code == "tx_conflict"

        tx = await recon.wait("sdk-1", timeout=60)
        assert tx.status == "committed"
        assert tx.operation("charge").op_key == accepted.op_key("charge")
        events = await recon.events("sdk-1")
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert events[0].type == "TransactionAccepted"

        with pytest.raises(Conflict) as committed:
            await recon.abort("sdk-1", reason="too late")
        assert committed.value.code == "already_committed"
        with pytest.raises(NotFound) as missing:
            await recon.get("no-such-tx")
        assert missing.value.code == "not_found"
        assert await recon.reviews(state="open") == []
        # An agent key may not resolve reviews (v1's one deliberate break): typed 403.
        with pytest.raises(Forbidden) as agent_resolving:
            await recon.resolve("rv_missing", "applied", note="n")
        assert agent_resolving.value.code == "operator_only"

    async with AsyncRecon(stack.intake_url, api_key="wrong-key") as stranger:
        with pytest.raises(Unauthorized):
            await stranger.get("sdk-1")

    await _review_through_the_sdk(stack)

    # The README's five lines, as a person pastes them after `make run`.
    readme = (REPO_ROOT / "README.md").read_text()
    (snippet,) = re.findall(r"Or from Python.*?```python\n(.*?)```", readme, re.S)
    assert len([line for line in snippet.splitlines() if line.strip()]) == 5, snippet
    assert await asyncio.to_thread(_run_snippet, snippet, stack.intake_url) == "committed"

    # The blocking client: a declined charge is compensated, and `wait` says so.
    def blocking() -> str:
        with Recon(stack.intake_url, api_key="demo-key") as recon:
            return recon.run(order("sdk-2", customer="cus_decline"), timeout=60).status

    assert await asyncio.to_thread(blocking) == "compensated"

    # Resending only what is idempotent, on the same stack (one start-up, not two).
    stack.stop("intake")
    async with AsyncRecon(stack.intake_url, api_key="demo-key", retries=60) as recon:
        # Not idempotent in the SDK's policy: refused at once, never resent.
        with pytest.raises(Unavailable) as down:
            await recon.abort("sdk-3")
        assert down.value.code == "unreachable"
        submission = asyncio.create_task(recon.submit(order("sdk-3")))
        await asyncio.sleep(0)  # the first attempt is made against the stopped intake
        stack.start("intake")
        accepted = await asyncio.wait_for(submission, timeout=120)
        assert accepted.tx_id == "sdk-3"
        assert (await recon.wait("sdk-3", timeout=60)).status == "committed"


async def _review_through_the_sdk(stack: Stack) -> None:
    """A key someone else already used at the provider for another payload: the charge
    goes to manual review, which an operator lists, reads and resolves with the SDK."""
    key = op_key(
        tenant="demo", environment="dev", provider="sandbox", tx_id="sdk-rv", action="charge"
    )
    async with httpx.AsyncClient() as http:
        taken = await http.post(
            f"{stack.sandbox_url}/v1/payments/charge",
            headers={"Idempotency-Key": key},
            json={"amount": 1, "currency": "usd", "customer": "cus_9", "metadata": {}},
        )
        assert taken.status_code == 200, taken.text
    async with (
        AsyncRecon(stack.intake_url, api_key="demo-key") as agent,
        AsyncRecon(stack.intake_url, api_key="ops-key") as operator,
    ):
        await agent.submit(order("sdk-rv"))
        assert (await agent.wait("sdk-rv", timeout=60)).status == "manual_review"
        (review,) = await operator.reviews(state="open")
        assert (review.tx_id, review.action, review.op_key) == ("sdk-rv", "charge", key)
        assert (await operator.review(review.id)).evidence
        with pytest.raises(NotFound):
            await operator.resolve("rv_missing", "applied", note="n")
        resolving = await operator.resolve(review.id, "applied", note="seen")
        assert (resolving.state, resolving.resolution) == ("resolving", "applied")
        with pytest.raises(Conflict) as twice:
            await operator.resolve(review.id, "not_applied", note="no", actor="ops")
        assert twice.value.code == "review_already_resolved"
        assert (await agent.wait("sdk-rv", until=TERMINAL, timeout=60)).status == "committed"


def _run_snippet(snippet: str, intake_url: str) -> str:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(snippet.replace("http://127.0.0.1:8080", intake_url), {})
    return printed.getvalue().strip()
