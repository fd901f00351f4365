"""`audit bundle` copies the previews a transaction's approvals bound to into its bundle
(docs/receipts.md, "Evidence bundles"), on real Kafka and Postgres: the transaction is
audit-bench's synthetic one (signed with the development key), the approval a command
beside it and the preview a row of the intake's preview store."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
from aiokafka import AIOKafkaProducer
from test_audit import cli

from events.topics import Topics
from services.devtools.synthetic_log import transaction_records, tx_coordinates
from services.kafka_setup import ensure_topics


async def test_a_bundle_carries_the_previews_its_approvals_bound_to(
    kafka_bootstrap: str, database_url: str, topic_prefix: str, tmp_path: Path
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    index = 7
    tenant, tx_id = tx_coordinates(index)
    records = transaction_records(index, datetime(2026, 12, 3, tzinfo=UTC))
    bound, other = f"d-{uuid.uuid4().hex}", f"d-{uuid.uuid4().hex}"
    approval = {
        "type": "ApproveOperation",
        "tenant": tenant,
        "tx_id": tx_id,
        "action": "charge",
        "preview_digest": bound,
    }
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for record in records:
            if record.role in ("events", "commands", "observations", "checkpoints"):
                topic = getattr(topics, record.role)
                await producer.send_and_wait(topic, key=record.key, value=record.value)
        key = records[0].key
        await producer.send_and_wait(topics.commands, key=key, value=json.dumps(approval).encode())
    finally:
        await producer.stop()
    shown = {"preview_id": "p-bound", "steps": [{"action": "charge", "effects": {"amount": 1299}}]}
    conn = await asyncpg.connect(database_url)
    try:
        for preview_id, digest, body in (
            (f"p-{bound}", bound, shown),
            (f"p-{other}", other, {"not": "bound"}),  # a preview no approval names
        ):
            await conn.execute(
                "INSERT INTO previews (tenant, preview_id, tx_id, proposal_digest, digest, body)"
                " VALUES ($1, $2, $3, 'proposal', $4, $5::jsonb)",
                tenant,
                preview_id,
                tx_id,
                digest,
                json.dumps(body),
            )
    finally:
        await conn.close()

    env = {
        **os.environ,
        "RECON_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "RECON_DATABASE_URL": database_url,
        "RECON_TOPIC_PREFIX": topic_prefix,
    }
    out = tmp_path / "bundle.json"
    code, stdout, err = await cli(
        env, "audit", "bundle", "--tx", tx_id, "--tenant", tenant, "--out", str(out)
    )
    assert code == 0, (stdout, err)
    assert stdout.strip().endswith(", VALID)")  # what is copied beside the chain changes no verdict
    bundle = json.loads(out.read_text())
    [preview] = bundle["evidence"]["previews"]
    assert (preview["preview_id"], preview["preview_digest"]) == (f"p-{bound}", bound)
    assert preview["preview"] == shown and preview["created_at"]
    assert approval in bundle["evidence"]["commands"]
