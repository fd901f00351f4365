"""Agents that speak Kafka (issue 14, item 0): an intent produced to the tenant's
`recon.intents.<tenant>` topic is accepted exactly as over HTTP (same op keys) and commits;
a malformed one, a conflicting one and one keyed for another tenant are answered with the
HTTP API's error codes on `recon.intent-replies.<tenant>` and record nothing. Real
processes (the stack), real Kafka and Postgres.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiokafka import AIOKafkaProducer
from support.recon_client import Recon, transaction
from support.topic_records import read_records

from events.topics import Topics
from services.devtools.stack import Stack
from services.intake.errors import UNSTORABLE_MESSAGE


async def replies(
    stack: Stack, tenant: str, wanted: dict[str, str], timeout: float = 60
) -> dict[str, dict[str, Any]]:
    """For each tx_id in `wanted`, a reply of the given status (`accepted` or `refused`) on
    `tenant`'s reply topic, once all are there. Delivery is at least once: a reply may be
    repeated (after a rebalance), and replies of different tx_ids sit on different
    partitions, so neither the last reply nor the order across keys says anything."""
    topic = Topics(stack.topic_prefix).intent_replies(tenant)
    deadline = time.monotonic() + timeout
    found: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        for r in await read_records(stack.kafka_bootstrap, topic):
            if r.key is None or r.value is None:
                continue
            reply = json.loads(r.value)
            if wanted.get(r.key.decode()) == reply["status"]:
                found[r.key.decode()] = reply
        if set(wanted) <= set(found):
            return found
        await asyncio.sleep(0.3)
    raise AssertionError(f"no replies for {set(wanted) - set(found)} within {timeout}s: {found}")


async def test_kafka_intents_commit_and_refusals_record_nothing(
    two_tenants: tuple[Stack, Recon],
) -> None:
    stack, recon = two_tenants
    other = Recon(stack.intake_url, stack.sandbox_url, api_key="other-key")
    topics = Topics(stack.topic_prefix)
    producer = AIOKafkaProducer(
        bootstrap_servers=stack.kafka_bootstrap, acks="all", request_timeout_ms=60000
    )
    await producer.start()

    async def produce(key: str, body: Any) -> None:
        value = body if isinstance(body, bytes) else json.dumps(body).encode()
        await producer.send_and_wait(topics.intents("demo"), key=key.encode(), value=value)

    try:
        await produce("demo/kafka-ok", transaction("kafka-ok"))
        first = await replies(stack, "demo", {"kafka-ok": "accepted"})
        assert first["kafka-ok"]["status"] == "accepted", first
        # Malformed: no steps; not JSON at all; a conflicting body for the accepted tx_id;
        # a record keyed for another tenant; a body that names a tenant.
        await produce("demo/kafka-bad", {"tx_id": "kafka-bad", "agent_id": "a", "steps": []})
        await produce("demo/kafka-junk", b"{not json")
        conflicting = transaction("kafka-ok")
        conflicting["agent_id"] = "someone-else"
        await produce("demo/kafka-ok", conflicting)
        await produce("other/kafka-theirs", transaction("kafka-theirs"))
        await produce("demo/kafka-named", {**transaction("kafka-named"), "tenant": "other"})
        huge = transaction("kafka-huge")
        huge["steps"][0]["payload"]["note"] = "x" * 300_000  # over the 256 KiB of the HTTP door
        await produce("demo/kafka-huge", huge)
        unstorable = transaction("kafka-nul", customer="cus_\u0000")  # jsonb cannot hold it
        await produce("demo/kafka-nul", unstorable)
        refused = (
            "kafka-ok",
            "kafka-bad",
            "kafka-junk",
            "kafka-theirs",
            "kafka-named",
            "kafka-huge",
            "kafka-nul",
        )
        answered = await replies(stack, "demo", dict.fromkeys(refused, "refused"))
        conflict = answered["kafka-ok"]
        for tx_id in ("kafka-bad", "kafka-junk", "kafka-theirs", "kafka-named", "kafka-nul"):
            refusal = answered[tx_id]
            assert (refusal["status"], refusal["http_status"], refusal["error"]) == (
                "refused",
                422,
                "invalid_request",
            ), refusal
        assert (conflict["http_status"], conflict["error"]) == (409, "tx_conflict"), conflict
        too_large = answered["kafka-huge"]
        assert (too_large["http_status"], too_large["error"]) == (413, "body_too_large")
        # Refused as the HTTP door refuses it, not dead-lettered as unforeseen.
        assert answered["kafka-nul"]["message"] == UNSTORABLE_MESSAGE

        # The accepted intent commits, under the op keys HTTP gives for the same body.
        done = await recon.wait_terminal("kafka-ok")
        assert done["status"] == "committed", done
        over_http = await recon.submit(transaction("kafka-ok"))
        assert over_http.status_code in (200, 202), over_http.text
        assert over_http.json()["operations"] == first["kafka-ok"]["operations"]
        assert {o["op_key"] for o in done["operations"]} == {
            o["op_key"] for o in first["kafka-ok"]["operations"]
        }
        # The conflicting body changed nothing; the refused ones left no transaction,
        # for demo nor for the tenant a key or a body named.
        # (Evidence may still grow: the provider's webhook can land after the commit.)
        seen = (await recon.get("kafka-ok")).json()["operations"]
        assert [(o["op_key"], o["state"]) for o in seen] == [
            (o["op_key"], o["state"]) for o in done["operations"]
        ]
        for tx_id in refused[1:]:
            assert (await recon.get(tx_id)).status_code == 404, tx_id
            assert (await other.get(tx_id)).status_code == 404, tx_id
        # Nothing was answered on the other tenant's reply topic.
        assert await read_records(stack.kafka_bootstrap, topics.intent_replies("other")) == []
    finally:
        await producer.stop()
        await other.close()
