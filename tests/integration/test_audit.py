"""The auditor's command line (promise 6): `audit verify` finds a removed or altered event
on recon.events, and `audit rebuild --compare` rebuilds from offset 0 projections identical
to the live ones. Both run as the operator runs them: `python -m services.cli` in a
subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import pytest
from aiokafka import AIOKafkaProducer
from conftest import Infra, _with_database
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support.compensation_support import failing_third_step
from support.recon_client import Recon, transaction
from support.synthetic_records import produce
from support.txbuilders import (
    log_of,
    log_with_note,
    observed,
    request_review,
    resolve,
    submit,
)

from events.checkpoint import Head, sign_checkpoint
from events.definition import Resolution
from events.envelope import GENESIS_HASH, Envelope, chain_hash, verify_chain
from events.inputs import Outcome
from events.keys import partition_key
from events.topics import Topics
from projections.writer import project_batch
from services.cli.audit_compare import compare
from services.config import Settings
from services.devtools.audit_vectors import VECTORS
from services.devtools.infra._process import REPO_ROOT
from services.devtools.stack import Stack
from services.devtools.synthetic_log import simulated_start, transaction_records, tx_coordinates
from services.kafka_setup import ensure_topics
from services.migrate import migrate
from services.signing_keys import development_key

# Every projected table, ordered by its key.
TABLES = {
    "transactions": "tenant, tx_id",
    "operations": "tenant, tx_id, action",
    "reviews": "id",
    "events": "tenant, tx_id, seq",
    "drift": "drift_id",
}


async def cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli",
        *args,
        cwd=REPO_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.fixture
async def rebuild_database(infra: Infra) -> AsyncIterator[str]:
    """A second fresh database, for the rebuild (the stack has the first one)."""
    name = f"t_rebuild_{uuid.uuid4().hex}"
    admin = await asyncpg.connect(infra.database_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    yield _with_database(infra.database_url, name)
    admin = await asyncpg.connect(infra.database_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def tables(url: str) -> dict[str, list[dict[str, Any]]]:
    conn = await asyncpg.connect(url)
    try:
        return {
            table: [dict(r) for r in await conn.fetch(f"SELECT * FROM {table} ORDER BY {key}")]
            for table, key in TABLES.items()
        }
    finally:
        await conn.close()


async def wait_quiet(url: str, quiet_s: float = 3, timeout: float = 60) -> None:
    """Until the live projection stops changing: late webhooks and lookups may still add
    evidence after a transaction looks terminal."""
    conn = await asyncpg.connect(url)
    try:
        deadline = time.monotonic() + timeout
        last, since = None, time.monotonic()
        while time.monotonic() < deadline:
            now = await conn.fetchval(
                "SELECT (SELECT count(*) FROM events)::text || '/' ||"
                " (SELECT coalesce(sum(next_offset), 0) FROM projection_offsets)::text"
            )
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return
            await asyncio.sleep(0.25)
    finally:
        await conn.close()
    raise AssertionError(f"the live projection kept changing for {timeout}s")


async def test_verify_and_rebuild_match_the_live_projection(
    stack: Stack, recon: Recon, rebuild_database: str, tmp_path: Path
) -> None:
    # One committed, one declined and compensated, one whose charge response was lost
    # (settled by a lookup or the provider's webhook; the other one adds late evidence).
    await recon.arm("payments.charge", "lose_response_after_commit")
    for body in (
        transaction("audit-lost"),
        transaction("audit-ok"),
        failing_third_step("audit-undo"),
    ):
        assert (await recon.submit(body)).status_code == 202
    assert (await recon.wait_terminal("audit-lost"))["status"] == "committed"
    assert (await recon.wait_terminal("audit-ok"))["status"] == "committed"
    assert (await recon.wait_terminal("audit-undo"))["status"] == "compensated"
    env = stack.env()
    # And one drift report on recon.drift: an effect no intent asked for, found by a scan.
    stray = await recon.http.post(
        f"{stack.sandbox_url}/v1/effects/unrecorded",
        json={"operation": "payments.charge", "payload": {"amount": 5, "currency": "usd"}},
    )
    assert stray.status_code == 200, stray.text
    # A grace period this short: an effect seconds old is not reported by default.
    code, out, err = await cli({**env, "RECON_DRIFT_GRACE_S": "0.001"}, "drift", "--scan")
    assert code == 0 and "effect_without_intent" in out, (out, err)
    await wait_quiet(stack.database_url)

    started = time.monotonic()
    code, out, err = await cli(env, "audit", "verify")
    assert code == 0, (out, err)
    assert "PROBLEM" not in out
    assert ": 3 transactions," in out and " 0 problems;" in out and out.strip().endswith("VALID")
    # The decider signed each transaction's end (services.decider.checkpoints).
    assert "; 3 transactions signed;" in out, out
    await _bundle_verifies_with_both_verifiers(env, tmp_path)
    # The tenant gets the same bundle from the API; a transaction it does not have is 404
    # (another tenant's too: the tenant store answers, as for every read).
    url = f"{recon.intake_url}/v1/transactions/audit-ok/receipt"
    receipt = await recon.http.get(url, headers=recon.headers)
    assert receipt.status_code == 200 and receipt.headers["Recon-Verdict"] == "VALID"
    assert (
        receipt.json()["events"] == json.loads((tmp_path / "audit-ok.json").read_text())["events"]
    )
    missing = await recon.http.get(url.replace("audit-ok", "no-such-tx"), headers=recon.headers)
    assert missing.status_code == 404, missing.text
    code, out, err = await cli(env, "audit", "verify", "--tenant", "demo", "--tx", "audit-undo")
    assert code == 0 and ": 1 transactions," in out, (out, err)

    # The timeline of the compensated one: the command, every answer, every event, in order.
    code, out, err = await cli(env, "audit", "timeline", "--tx", "audit-undo")
    assert code == 0, (out, err)
    kinds = [line.split()[3] for line in out.splitlines()]
    assert kinds[0] == "SubmitTransaction"
    assert kinds.index("TransactionFailed") < kinds.index("PlanCompensation")
    assert kinds.index("CompensationPlanned") < kinds.index("TransactionCompensated")
    assert kinds.count("TransactionAccepted") == 1
    code, out, err = await cli(env, "audit", "timeline", "--tx", "no-such-tx")
    assert code == 1 and "nothing on the log" in out

    code, out, err = await cli(env, "audit", "rebuild", "--into", rebuild_database, "--compare")
    assert code == 0, (out, err)
    assert "DIFF" not in out and "0 differences" in out
    print(f"audit verify x2 + rebuild --compare: {time.monotonic() - started:.1f}s")

    live, rebuilt = await tables(stack.database_url), await tables(rebuild_database)
    counts = {t: len(rows) for t, rows in rebuilt.items()}
    assert counts["transactions"] == 3 and counts["drift"] == 1, counts
    assert rebuilt == live

    # The comparison is not vacuous: rows altered or removed on one side are named.
    conn = await asyncpg.connect(rebuild_database)
    try:
        await conn.execute("UPDATE transactions SET status = 'failed' WHERE tx_id = 'audit-ok'")
        await conn.execute("DELETE FROM events WHERE tx_id = 'audit-lost' AND seq = 2")
        await conn.execute("UPDATE drift SET detail = '{}'")
        settings = Settings(
            kafka_bootstrap=stack.kafka_bootstrap,
            database_url=stack.database_url,
            topics=Topics(stack.topic_prefix),
            environment="dev",
        )
        differences = await compare(settings, conn, wait_s=1)
    finally:
        await conn.close()
    assert len(differences) == 3, differences
    assert "transactions demo/audit-ok: status: live 'committed', rebuilt 'failed'" in differences
    assert "events demo/audit-lost/2: in the live database, missing from the rebuild" in differences
    assert any(d.startswith("drift dr_") and ": detail: live {" in d for d in differences)

    # A rebuild never goes into a database that already holds a projection.
    code, out, err = await cli(env, "audit", "rebuild", "--into", rebuild_database)
    assert code == 2 and "fresh, empty database" in err, (out, err)


async def test_rebuild_refuses_the_live_database(database_url: str, topic_prefix: str) -> None:
    env = {**os.environ, "RECON_DATABASE_URL": database_url, "RECON_TOPIC_PREFIX": topic_prefix}
    code, out, err = await cli(env, "audit", "rebuild", "--into", database_url, "--compare")
    assert code == 2, (out, err)
    assert "refusing to rebuild into the live database" in err


async def test_verify_names_removed_and_altered_events(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)

    def chain(tx_id: str) -> list[Envelope]:
        return log_of(
            submit(["a", "b"], tx_id=tx_id),
            observed("a", 1, Outcome.SUCCEEDED, tx_id=tx_id),
            observed("b", 1, Outcome.SUCCEEDED, 1, tx_id=tx_id),
            tx_id=tx_id,
        )

    clean, gap, altered = chain("clean"), chain("gap"), chain("altered")
    # A log recon wrote before canonical forms were named (docs/canonical-form.md), and a
    # transaction naming a form this verifier does not know.
    legacy = (VECTORS / "legacy-log.jsonl").read_text().splitlines()
    unknown = chain("unknown")
    unknown[0] = unknown[0].model_copy(update={"canon": "jcs-2"})
    # A chain rewritten consistently after its head was signed: every hash recomputed, so
    # the chain holds, but the signed head is no longer on the log.
    original = chain("rewritten")
    signed = [signed_head(original), signed_head(clean)]
    rewritten = rechained(original, 1, {"attempt": 7})
    assert verify_chain(rewritten) == []
    assert len(gap) >= 4
    del gap[1]  # seq 2 removed: seq 3 follows seq 1
    # A valid envelope whose content no longer matches its hash.
    altered[1] = altered[1].model_copy(update={"data": {**altered[1].data, "attempt": 7}})
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for envelope in (*clean, *gap, *altered, *rewritten):
            await producer.send_and_wait(
                topics.events,
                key=partition_key(envelope.tenant, envelope.tx_id),
                value=envelope.model_dump_json().encode(),
            )
        for checkpoint, tx in zip(signed, ("rewritten", "clean"), strict=True):
            await producer.send_and_wait(
                topics.checkpoints, key=partition_key("demo", tx), value=checkpoint
            )

        await producer.send_and_wait(topics.events, key=b"demo/junk", value=b"{not json")
    finally:
        await producer.stop()

    env = {
        **os.environ,
        "RECON_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "RECON_TOPIC_PREFIX": topic_prefix,
    }
    code, out, err = await cli(env, "audit", "verify", "--progress-every", "5")
    assert code == 1, (out, err)
    problems = [line for line in out.splitlines() if line.startswith("PROBLEM")]
    assert any("tenant=demo tx=gap seq=3:" in p and "where 2 was expected" in p for p in problems)
    assert any("tx=gap seq=3: prev_hash" in p for p in problems), problems
    altered_problems = [p for p in problems if "tx=altered" in p]
    assert len(altered_problems) == 1, altered_problems
    assert altered_problems[0].startswith(
        f"PROBLEM tenant=demo tx=altered seq=2: hash does not match its content ({topics.events}["
    )
    assert any("not an event envelope" in p for p in problems)
    assert not any("tx=clean" in p for p in problems)
    [rewritten_problem] = [p for p in problems if "tx=rewritten" in p]
    assert f"seq={original[-1].seq}: hash is not the one the checkpoint signed" in rewritten_problem
    assert ": 4 transactions," in out and out.strip().endswith("INVALID")
    assert "; 1 transactions signed;" in out
    assert "records read" in err  # progress lines
    # Split over processes (this one reading a share itself, some reading only empty
    # partitions), the same verdict and problems.
    for workers in ("2", "4"):
        code, split, err = await cli(env, "audit", "verify", "--workers", workers)
        assert code == 1 and sorted(split.splitlines()) == sorted(out.splitlines()), (split, err)

    # Alone on a log of its own (the unreadable record above is every filter's problem).
    alone = Topics(f"{topic_prefix}-unknown")
    await ensure_topics(kafka_bootstrap, alone)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for envelope in (*clean, *unknown):
            await producer.send_and_wait(
                alone.events,
                key=partition_key(envelope.tenant, envelope.tx_id),
                value=envelope.model_dump_json().encode(),
            )
        for line in legacy:
            await producer.send_and_wait(
                alone.events, key=partition_key("demo", "legacy-1"), value=line.encode()
            )
        # Signed by a key no verifier here knows: unverifiable, not invalid.
        stranger = signed_head(clean, Ed25519PrivateKey.generate())
        await producer.send_and_wait(
            alone.checkpoints, key=partition_key("demo", "clean"), value=stranger
        )
    finally:
        await producer.stop()
    env_alone = {**env, "RECON_TOPIC_PREFIX": f"{topic_prefix}-unknown"}
    code, out, err = await cli(env_alone, "audit", "verify", "--tx", "legacy-1", "--json")
    report = json.loads(out)
    assert code == 0 and report["verdict"] == "VALID", (out, err)
    assert report["canonical_forms"] == {"legacy-json": 7} and report["events"] == 7
    code, out, err = await cli(env_alone, "audit", "verify", "--json")
    report = json.loads(out)
    assert code == 3 and report["verdict"] == "UNVERIFIABLE", (out, err)
    assert [(p["tx_id"], p["seq"], p["unverifiable"]) for p in report["problems"]] == [
        ("unknown", 1, True),
        (None, None, True),
    ]
    assert "is not among the known keys" in report["problems"][1]["message"]
    assert "'jcs-2' is not supported" in report["problems"][0]["message"]

    code, out, err = await cli(env, "audit", "verify", "--tx", "clean")
    # The unreadable record belongs to no transaction, so it is reported whatever the filter.
    assert code == 1 and ": 1 transactions," in out, (out, err)
    assert not any(line.startswith("PROBLEM tenant=") for line in out.splitlines()), out


async def _bundle_verifies_with_both_verifiers(env: dict[str, str], tmp_path: Path) -> None:
    """`audit bundle` of a transaction the real decider signed: VALID for recon's
    verifier and for the Go one (verifier-go/), which get only the file and the public
    keys `audit keys` prints; one altered event makes both say INVALID."""
    out = tmp_path / "audit-ok.json"
    code, stdout, err = await cli(env, "audit", "bundle", "--tx", "audit-ok", "--out", str(out))
    assert code == 0 and "VALID" in stdout, (stdout, err)
    bundle = json.loads(out.read_text())
    assert bundle["checkpoint"]["heads"] and bundle["evidence"]["observations"]
    assert [e["seq"] for e in bundle["events"]] == list(range(1, len(bundle["events"]) + 1))
    code, stdout, err = await cli(env, "audit", "verify-bundle", str(out), "--json")
    assert code == 0 and json.loads(stdout)["verdict"] == "VALID", (stdout, err)
    code, keys, err = await cli(env, "audit", "keys")
    assert code == 0, err
    (tmp_path / "keys.json").write_text(keys)
    bundle["events"][2]["data"]["action"] = "forged"
    (tmp_path / "forged.json").write_text(json.dumps(bundle))
    go = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    binary = tmp_path / "verify-bundle"
    build = ["go", "build", "-o", str(binary), "."]
    built = await asyncio.to_thread(subprocess.run, build, cwd=REPO_ROOT / "verifier-go", env=go)
    assert built.returncode == 0
    for name, expected in (("audit-ok.json", 0), ("forged.json", 1)):
        verify = [str(binary), "-keys", str(tmp_path / "keys.json"), str(tmp_path / name)]
        run = await asyncio.to_thread(subprocess.run, verify, capture_output=True)
        assert run.returncode == expected, run


def signed_head(log: list[Envelope], key: Ed25519PrivateKey | None = None) -> bytes:
    last = log[-1]
    head = Head(last.tenant, last.tx_id, last.seq, last.hash)
    return orjson.dumps(sign_checkpoint(key or development_key(), "2026-01-01T00:00:00", [head]))


def rechained(log: list[Envelope], index: int, change: dict[str, Any]) -> list[Envelope]:
    """log with event `index`'s data changed and every hash from it on recomputed."""
    out, prev = [], GENESIS_HASH
    for i, env in enumerate(log):
        data = {**env.data, **change} if i == index else env.data
        body = env.model_dump(mode="json", exclude={"hash"}) | {"prev_hash": prev, "data": data}
        prev = chain_hash(prev, body)
        out.append(Envelope(**body, hash=prev))
    return out


async def _produce_synthetic(kafka_bootstrap: str, topics: Topics, count: int) -> None:
    """`count` transactions of the audit benchmark's log (the real decider's events and
    their inputs), with their simulated Kafka timestamps."""
    start = simulated_start(count)
    records = (r for i in range(count) for r in transaction_records(i, start, webhook_every=2))
    await produce(kafka_bootstrap, topics, records, ("commands", "observations", "events"))


async def test_rebuild_sets_aside_what_the_projector_cannot_store_and_verify_keeps_it(
    kafka_bootstrap: str, topic_prefix: str, rebuild_database: str
) -> None:
    # An event holding a NUL (an older version's log): a link of its chain for the auditor,
    # and a record the projector sets aside (projections.decode). Before, the rebuild's
    # COPY refused it and the rebuild failed.
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    logs = [log_with_note("with-nul", "\x00"), log_with_note("plain", "no NUL")]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for envelope in (*logs[0], *logs[1]):
            await producer.send_and_wait(
                topics.events,
                key=partition_key(envelope.tenant, envelope.tx_id),
                value=envelope.model_dump_json().encode(),
            )
    finally:
        await producer.stop()
    env = {
        **os.environ,
        "RECON_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "RECON_TOPIC_PREFIX": topic_prefix,
    }

    code, out, err = await cli(env, "audit", "verify")
    assert code == 0 and ": 2 transactions," in out and out.strip().endswith("VALID"), (out, err)
    code, out, err = await cli(env, "audit", "rebuild", "--into", rebuild_database)
    assert code == 0, (out, err)
    assert err.count("unstorable: a NUL in its text") == len(logs[0]), err
    assert f"{len(logs[0])} records skipped" in err, err
    rebuilt = await tables(rebuild_database)
    assert [row["tx_id"] for row in rebuilt["transactions"]] == ["plain"]


async def test_timeline_reads_the_transactions_window_and_falls_back_to_its_partition(
    kafka_bootstrap: str, topic_prefix: str, rebuild_database: str
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    await _produce_synthetic(kafka_bootstrap, topics, 60)
    env = {
        **os.environ,
        "RECON_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "RECON_TOPIC_PREFIX": topic_prefix,
        "RECON_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/unreachable",
    }
    code, out, err = await cli(env, "audit", "rebuild", "--into", rebuild_database)
    assert code == 0, (out, err)
    projected = {**env, "RECON_DATABASE_URL": rebuild_database}
    for i in (0, 31, 59):
        tenant, tx_id = tx_coordinates(i)
        # The whole log, read as before (no projection, no tenant: every partition).
        every = ("--progress-every", "1")
        code, everything, err = await cli(env, "audit", "timeline", "--tx", tx_id, *every)
        assert code == 0 and "records read" in err, (everything, err)
        kinds = [line.split()[3] for line in everything.splitlines()]
        assert kinds[0] == "SubmitTransaction" and "TransactionCommitted" in kinds
        assert kinds.count("OperationObserved") == (4 if i % 2 == 0 else 3), kinds
        # The projection places it: the same lines, without reading the whole log.
        code, out, err = await cli(projected, "audit", "timeline", "--tx", tx_id, *every)
        assert code == 0 and out == everything, (out, everything, err)
        assert "records read" not in err
        # No projection but a tenant: its partition of each topic.
        code, out, err = await cli(
            env, "audit", "timeline", "--tx", tx_id, "--tenant", tenant, *every
        )
        assert code == 0 and out == everything, (out, everything, err)
        assert "projection unreachable" in err
    code, out, err = await cli(projected, "audit", "timeline", "--tx", "bench-99999999")
    assert code == 1 and "nothing on the log" in out, (out, err)
    code, out, err = await cli(projected, "audit", "verify", "--workers", "2")
    assert code == 0 and ": 60 transactions," in out and " 0 problems" in out, (out, err)


async def test_bulk_projection_writes_the_rows_of_the_row_by_row_one(
    fresh_database: str, rebuild_database: str
) -> None:
    """projections.writer.project_batch with bulk=True (audit rebuild) against the live
    projector's row-by-row writes, on the same records in the same batches: reviews
    opened and resolved, a transaction spread over batches, an event replayed."""
    logs = [
        log_of(
            submit(["a", "b"], tx_id="bulk-ok"),
            observed("a", 1, Outcome.SUCCEEDED, tx_id="bulk-ok"),
            observed("b", 1, Outcome.SUCCEEDED, 1, tx_id="bulk-ok"),
            tx_id="bulk-ok",
        ),
        log_of(
            submit(["a"]),
            observed("a", 1, Outcome.UNKNOWN),
            request_review("a", 1),
            resolve("a", 1, Resolution.APPLIED),
        ),
    ]
    records = [(0, o, env) for o, env in enumerate(e for log in logs for e in log)]
    records.append(records[3])  # a replayed event: the row it would duplicate stays
    batches = [records[:5], records[5:9], records[9:]]
    urls = {False: fresh_database, True: rebuild_database}
    await asyncio.to_thread(migrate, rebuild_database, lambda line: None)  # as rebuild does
    for bulk, url in urls.items():
        conn = await asyncpg.connect(url)
        try:
            for batch in batches:
                await project_batch(conn, "t.recon.events", batch, bulk=bulk)
        finally:
            await conn.close()
    row_by_row, bulk_rows = await tables(fresh_database), await tables(rebuild_database)
    assert row_by_row["reviews"] and len(row_by_row["transactions"]) == 2
    assert row_by_row == bulk_rows
