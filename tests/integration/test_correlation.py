"""One id finds everything (issue 12, item 4): for one transaction, its op key is in the
provider's record of the call, in the log lines of every process that handled it, in the
exported spans and in `GET /v1/operations/{op_key}`, and all of them name the one trace
the agent started."""

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.recon_client import Recon, op, transaction
from support.stack_fixtures import StackWith

from services.devtools.stack import Stack


@pytest.fixture
async def traced(stack_with: StackWith, tmp_path: Path) -> AsyncIterator[tuple[Stack, Recon]]:
    async with stack_with(
        RECON_TRACE_EXPORTER=f"file:{tmp_path}/spans-{{process}}.jsonl",
        RECON_LOG_FORMAT="json",
        RECON_API_KEYS="demo-key=demo,other-key=other",
    ) as pair:
        yield pair


def _json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue  # a line from before logging was configured (a library's print)
    return lines


async def test_one_op_key_and_one_trace_link_provider_logs_spans_and_record(
    traced: tuple[Stack, Recon], tmp_path: Path
) -> None:
    stack, recon = traced
    trace_id = secrets.token_hex(16)
    response = await recon.http.post(
        f"{stack.intake_url}/v1/transactions",
        json=transaction("corr-1"),
        headers={**recon.headers, "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"},
    )
    assert response.status_code == 202, response.text
    tx = await recon.wait_terminal("corr-1")
    assert tx["status"] == "committed"
    key = op(tx, "charge")["op_key"]

    # The provider's record: the effect names the op key, the call names the trace.
    [effect] = [e for e in await recon.effects() if e["idempotency_key"] == key]
    assert effect["metadata"]["op_key"] == key
    [call] = [c for c in await recon.calls(key) if c["kind"] == "apply"]
    assert call["traceparent"].split("-")[1] == trace_id

    # Every process that handled the charge logged a line naming its key and the trace.
    logs = tmp_path / "logs"
    for process, field in (("intake", "msg"), ("decider", "op_key")):
        lines = _json_lines(logs / f"{process}.log")
        assert any(
            key in str(line.get(field)) and line.get("trace_id") == trace_id for line in lines
        ), f"{process}: no log line with {key} in trace {trace_id}"
    # The call's lines (the decider makes it, services/dispatcher/executor.py).
    dispatcher_lines = [
        line
        for line in _json_lines(logs / "decider.log")
        if line.get("op_key") == key and line.get("logger") == "services.dispatcher.executor"
    ]
    assert all(line["tx_id"] == "corr-1" and line["attempt"] == 1 for line in dispatcher_lines)

    # The spans: each hop exported one under the agent's trace, the call with the key.
    def spans() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for path in tmp_path.glob("spans-*.jsonl"):
            found += _json_lines(path)
        return [s for s in found if s["context"]["trace_id"] == f"0x{trace_id}"]

    # Spans are exported in batches (every 0.5 s): wait for the two processes' spans and the
    # charge's call among them (the reserve's call may be exported in an earlier batch; the
    # decider makes the calls).
    wanted = {"recon-intake", "recon-decider"}

    def charge_called(linked: list[dict[str, Any]]) -> bool:
        calls = [s for s in linked if s["name"] == "dispatcher.call"]
        return key in {s["attributes"].get("recon.op_key") for s in calls}

    deadline = time.monotonic() + 30
    while True:
        linked = spans()
        hops = {s["resource"]["attributes"]["service.name"] for s in linked}
        if wanted <= hops and charge_called(linked):
            break
        assert time.monotonic() < deadline, f"spans of {wanted} and the charge's call: {linked}"
        await asyncio.sleep(0.2)
    assert {
        s["attributes"].get("recon.tx_id") for s in linked if s["name"] == "decider.decide"
    } == {"corr-1"}

    # And the durable record, by the key alone; another tenant's key cannot see it.
    record = await recon.http.get(f"{stack.intake_url}/v1/operations/{key}", headers=recon.headers)
    assert record.status_code == 200, record.text
    body = record.json()
    assert (body["tx_id"], body["action"], body["state"]) == ("corr-1", "charge", "confirmed")
    submitted = next(s for s in transaction("corr-1")["steps"] if s["action"] == "charge")
    assert body["approved"]["payload"] == submitted["payload"]
    assert [d["attempt"] for d in body["dispatches"]] == [1]
    assert body["observations"][0]["type"] == "OperationConfirmed"
    assert body["observations"][0]["evidence"]["outcome"] == "succeeded"
    assert body["owner"]["agent_id"] == "agent-7"
    missing = await recon.http.get(
        f"{stack.intake_url}/v1/operations/rk1_nothing", headers=recon.headers
    )
    assert missing.status_code == 404
    theirs = await recon.http.get(
        f"{stack.intake_url}/v1/operations/{key}", headers={"Authorization": "Bearer other-key"}
    )
    assert theirs.status_code == 404, theirs.text
