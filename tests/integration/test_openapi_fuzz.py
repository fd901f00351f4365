"""Bad input against the intake's own OpenAPI document (issue 7, item 16).

schemathesis reads `/openapi.json` from a real stack and sends what it generates from it to
every route (its examples, boundary and negative cases, random fuzzing, and chains of calls),
once with the demo API key and once without any. Every answer must be documented (status,
content type, body schema), none may be a 5xx, and a refused request must have changed
nothing: after the run, every intent row, resolution, webhook delivery and command in Kafka
is traced back to a request the intake answered 2xx, from the recorded traffic.

The webhook route is fuzzed only without a valid signature (it is signed, not keyed): it must
refuse everything and record nothing, never 5xx.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import asyncpg
import httpx
import pytest
from support.topic_records import read_topic

from events.topics import Topics
from services.devtools.stack import Stack
from services.intake.example import example_transaction
from services.intake.submission import SubmissionRequest

pytestmark = pytest.mark.timeout(300)

# Bounded so the file stays around a minute on a loaded 2-core machine. A fixed seed rather
# than --generation-deterministic: the latter never tried a large integer, so it missed the
# older_than_s overflow that this seed finds when the bound is removed.
KEYED_EXAMPLES = 10
ANONYMOUS_EXAMPLES = 3
SEED = 1
TENANT = "demo"
KEY = {"Authorization": "Bearer demo-key"}
OPERATOR = {"Authorization": "Bearer ops-key"}
INTAKE_COMMANDS = {
    "SubmitTransaction",
    "AbortTransaction",
    "ResolveReview",
    "ClaimTransaction",
    "ReleaseTransaction",
}
# Every route's business rules (a known provider and operation, unique actions, an existing
# review, a configured webhook secret, a valid signature) go beyond what JSON Schema can say,
# so a schema-valid request may rightly be refused with a documented 4xx: schemathesis's
# positive_data_acceptance would flag exactly those. Every other check runs.
EXCLUDED_CHECKS = "positive_data_acceptance"


async def _schemathesis(url: str, har: Path, *headers: str) -> list[dict[str, Any]]:
    args = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{url}/openapi.json",
        "--checks=all",
        f"--exclude-checks={EXCLUDED_CHECKS}",
        f"--max-examples={KEYED_EXAMPLES if headers else ANONYMOUS_EXAMPLES}",
        f"--seed={SEED}",
        "--request-timeout=20",
        "--no-color",
        "--report=har",
        f"--report-har-path={har}",
        # Keys and signatures must be visible in the recording, to tell the runs apart.
        "--output-sanitize=false",
    ]
    for header in headers:
        args += ["--header", header]
    process = await asyncio.create_subprocess_exec(
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=har.parent,  # whatever else it writes stays in the test's directory
    )
    output, _ = await process.communicate()
    report = output.decode(errors="replace")
    assert process.returncode == 0, f"schemathesis found problems:\n{report}"
    entries: list[dict[str, Any]] = json.loads(await asyncio.to_thread(har.read_text))["log"][
        "entries"
    ]
    return entries


def _path(entry: dict[str, Any]) -> list[str]:
    return [unquote(part) for part in urlsplit(entry["request"]["url"]).path.split("/")[1:]]


def _accepted_commands(entries: list[dict[str, Any]]) -> tuple[set[str], set[tuple[str, str]]]:
    """The message ids of the commands the 2xx answers stand for, and the accepted
    (tx_id, fingerprint) intents."""
    commands: set[str] = set()
    intents: set[tuple[str, str]] = set()
    for entry in entries:
        request, status = entry["request"], entry["response"]["status"]
        path = _path(entry)
        # A fenced session's command is refused (409 fenced) and recorded on purpose: its
        # refusal goes on the transaction's chain (services.intake.ownership).
        fenced = status == 409 and "fenced" in entry["response"]["content"].get("text", "")
        if request["method"] != "POST" or not (200 <= status < 300 or fenced):
            continue
        if path[:2] == ["v1", "transactions"] and path[3:] in (["abort"], ["release"]):
            session = _session_of(request)
            if session is not None:
                # Per session (events.keys.session_abort_id, release_id).
                commands.add(f"{path[3]}:{TENANT}:{path[2]}:{session}")
                continue
        if path[:2] == ["v1", "transactions"] and path[3:] == ["claim"]:
            # A claim's id ends with its time (events.keys.claim_id): matched by prefix.
            commands.add(f"claim:{TENANT}:{path[2]}:{_session_of(request)}:")
            continue
        if path == ["v1", "transactions"]:
            body = SubmissionRequest.model_validate_json(request["postData"]["text"])
            fingerprint = body.fingerprint()
            intents.add((body.tx_id, fingerprint))
            commands.add(f"submit:{TENANT}:{body.tx_id}:{fingerprint[:16]}")
        elif path[:2] == ["v1", "transactions"] and path[3:] == ["abort"]:
            commands.add(f"abort:{TENANT}:{path[2]}")
        elif path[:2] == ["v1", "reviews"] and path[3:] == ["resolve"]:
            commands.add(f"resolve:{path[2]}")
    return commands, intents


def _session_of(request: dict[str, Any]) -> str | None:
    try:
        body = json.loads(request.get("postData", {}).get("text") or "{}")
    except ValueError:
        return None
    session = body.get("session_id") if isinstance(body, dict) else None
    return session if isinstance(session, str) else None


def _refused_requests(accepted_tx_id: str) -> list[tuple[str, str, dict[str, Any] | None, int]]:
    """Requests valid by the schema, or carrying what schemathesis never sends, that the
    intake must refuse: the fuzzer rarely builds a submission that passes every field check
    and fails only a rule of the deployment, so these make sure the refusal paths that run
    closest to a write are tried."""
    unknown_provider = example_transaction("refused-provider")
    unknown_provider["steps"][1]["provider"] = "nobody"
    duplicate_action = example_transaction("refused-duplicate")
    duplicate_action["on_commit"][0]["action"] = "reserve"
    irreversible_first = example_transaction("refused-irreversible")
    del irreversible_first["steps"][0]["compensation"]
    nul_payload = example_transaction("refused-nul")
    nul_payload["steps"][0]["payload"]["sku"] = "sku\x00"
    nul_agent = {**example_transaction("refused-nul-agent"), "agent_id": "a\x00"}
    conflicting = example_transaction(accepted_tx_id, customer="cus_another")  # another body
    resolution = {"resolution": "applied", "note": "", "actor": "x"}
    return [
        ("POST", "/v1/transactions", unknown_provider, 422),
        ("POST", "/v1/transactions", duplicate_action, 422),
        ("POST", "/v1/transactions", irreversible_first, 422),
        ("POST", "/v1/transactions", conflicting, 409),
        # Postgres cannot store NUL characters: each of these was a 500.
        ("POST", "/v1/transactions", nul_payload, 422),
        ("POST", "/v1/transactions", nul_agent, 422),
        ("GET", "/v1/transactions/a%00b", None, 422),
        ("GET", "/v1/transactions/a%00b/events", None, 422),
        ("POST", "/v1/transactions/a%00b/abort", None, 422),
        ("GET", "/v1/reviews/a%00b", None, 422),
        ("POST", "/v1/reviews/a%00b/resolve", resolution, 422),
        # The finding: the date arithmetic overflowed (a 500).
        ("GET", "/v1/reviews?older_than_s=412171971152873", None, 422),
        ("POST", "/v1/transactions/never-submitted/abort", None, 404),
        ("POST", "/v1/reviews/no-such-review/resolve", resolution, 404),
    ]


async def _send_refused_requests(url: str, accepted_tx_id: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=20, headers=KEY) as client:
        for method, path, body, status in _refused_requests(accepted_tx_id):
            # Resolving a review takes an operator key (an agent key is 403 before anything).
            headers = OPERATOR if path.endswith("/resolve") else None
            response = await client.request(method, path, json=body, headers=headers)
            assert response.status_code == status, (method, path, response.text)


def _routes_tried(entries: list[dict[str, Any]]) -> set[tuple[str, str]]:
    tried = set()
    for entry in entries:
        path = _path(entry)
        route = "/".join(path[:2] + (["{id}"] if len(path) > 2 else []) + path[3:])
        tried.add((entry["request"]["method"], "/" + route))
    return tried


async def test_fuzzing_the_openapi_document_finds_no_5xx_no_undocumented_answer_and_no_state_change_from_a_refusal(  # noqa: E501
    stack: Stack, tmp_path: Path
) -> None:
    keyed = await _schemathesis(
        stack.intake_url, tmp_path / "keyed.har", "Authorization: Bearer demo-key"
    )
    anonymous = await _schemathesis(stack.intake_url, tmp_path / "anonymous.har")
    entries = keyed + anonymous

    # The run reached every route, and not only with refusals: the documented examples
    # submit the README's intent and abort it, so the accepted path is exercised too.
    tried = _routes_tried(entries)
    for route in [
        ("POST", "/v1/transactions"),
        ("GET", "/v1/transactions/{id}"),
        ("GET", "/v1/transactions/{id}/events"),
        ("POST", "/v1/transactions/{id}/abort"),
        ("GET", "/v1/reviews"),
        ("GET", "/v1/reviews/{id}"),
        ("POST", "/v1/reviews/{id}/resolve"),
        ("GET", "/v1/drift"),
        ("POST", "/v1/webhooks/{id}"),
        ("GET", "/healthz"),
    ]:
        assert route in tried, f"schemathesis never called {route}"
    statuses = {entry["response"]["status"] for entry in entries}
    assert not {s for s in statuses if s >= 500}, statuses
    commands, intents = _accepted_commands(entries)
    assert intents, "no submission was accepted: the refusal check below would prove nothing"
    unauthenticated = [e for e in anonymous if _path(e)[:1] == ["v1"] and _path(e)[1] != "webhooks"]
    assert unauthenticated and all(
        e["response"]["status"] in (401, 405) for e in unauthenticated
    ), "a keyed route answered a request without an API key"

    await _send_refused_requests(stack.intake_url, min(intents)[0])

    # No refused request left anything behind.
    conn = await asyncpg.connect(stack.database_url)
    try:
        rows = await conn.fetch("SELECT tenant, tx_id, fingerprint FROM intents")
        resolutions = await conn.fetchval("SELECT count(*) FROM review_resolutions")
        deliveries = await conn.fetch("SELECT provider, delivery_id FROM webhook_deliveries")
    finally:
        await conn.close()
    stored = {(row["tx_id"], row["fingerprint"]) for row in rows}
    assert {row["tenant"] for row in rows} <= {TENANT}
    assert stored <= intents, f"intents recorded from refused submissions: {stored - intents}"
    # No review exists in a fresh stack, so no resolution can have been accepted.
    assert resolutions == 0
    # The only deliveries recorded are the sandbox's own, signed ones (for the accepted
    # intent's effects); none of the fuzzer's unsigned ones.
    async with httpx.AsyncClient(timeout=10) as client:
        sent = await client.get(f"{stack.sandbox_url}/v1/webhooks/deliveries")
    signed = {("sandbox", d["event_id"]) for d in sent.json()["deliveries"]}
    recorded = {(row["provider"], row["delivery_id"]) for row in deliveries}
    assert recorded <= signed, f"unsigned webhook deliveries recorded: {recorded - signed}"
    # The intake's own commands (the saga and the reconciler produce others there).
    produced = {
        command["message_id"]
        for command in await read_topic(stack.kafka_bootstrap, Topics(stack.topic_prefix).commands)
        if command["type"] in INTAKE_COMMANDS
    }
    claims = tuple(c for c in commands if c.startswith("claim:"))
    unexplained = {c for c in produced - commands if not c.startswith(claims or ("\0",))}
    assert not unexplained, f"commands from refused requests: {unexplained}"
