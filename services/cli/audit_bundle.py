"""`audit bundle --tx TX_ID` and `audit verify-bundle FILE` (docs/receipts.md, "Evidence
bundles").

A bundle is one transaction's evidence in one JSON file an auditor checks without recon
(events.bundle gives the verdict; verifier-go/ is a second verifier): its events in seq
order, the latest signed checkpoint of its head, the records its events were decided from
(the submission and approvals on recon.commands; every provider answer, lookup and webhook
on recon.observations, a webhook with its signature headers and raw body as received) and
the previews its approvals bound to (the intake's preview store). It reads only the
transaction's partition of each topic (the producers' partitioner on the key tenant/tx_id)
and of it only the transaction's window (services.cli.transaction_window), as `audit
timeline` does: the receipt route builds bundles in the intake, on demand of any tenant,
so what one costs is bounded by the transaction, not by how long the log has lived.
"""

import json
import sys
from pathlib import Path
from typing import Any

import asyncpg
from aiokafka.structs import TopicPartition

from events.bundle import FORMAT, verify_bundle
from events.keys import partition_key
from events.topics import Topics
from services.cli.log_snapshot import AuditError
from services.cli.partition_reader import PartitionReader, Record, open_reader
from services.cli.transaction_window import (
    SLACK_MS,
    Found,
    Known,
    Transaction,
    ask_projection,
    events_of,
    inputs_of,
)
from services.cli.verdict import exit_code, print_json
from services.config import Settings
from services.signing_keys import verify_keys


def _tenant_of(known: list[Known], tenant: str | None, tx_id: str) -> str:
    if tenant is not None:
        return tenant
    tenants = sorted({k.tenant for k in known})
    if len(tenants) != 1:
        found = ", ".join(tenants) or "no tenant the projection knows"
        raise AuditError(f"tx {tx_id}: {found}; name the tenant with --tenant")
    return tenants[0]


def _bodies(found: list[Found]) -> list[dict[str, Any]]:
    return [body for _, body in found]


def bundle_topics(topics: Topics) -> list[str]:
    """The topics a bundle is read from (open_reader's `topics`)."""
    return [topics.events, topics.commands, topics.observations, topics.checkpoints]


async def build_bundle(settings: Settings, tenant: str | None, tx_id: str) -> dict[str, Any]:
    """`audit bundle`: the bundle, placed on the log by the projection when it knows the
    transaction (else the partitions are read whole), its previews from the store."""
    known = await ask_projection(settings.database_url, settings.topics.events, tenant, tx_id)
    tenant = _tenant_of(known, tenant, tx_id)
    hint = next((k for k in known if k.tenant == tenant), None)
    async with open_reader(settings.kafka_bootstrap, bundle_topics(settings.topics)) as log:
        bundle = await bundle_from_log(log, settings.topics, tenant, tx_id, hint)
    evidence = bundle["evidence"]
    if not bound_digests(evidence["commands"]):
        return bundle  # no approval bound a preview: nothing to copy
    try:
        conn = await asyncpg.connect(settings.database_url, timeout=3)
    except (TimeoutError, OSError, asyncpg.PostgresError) as error:
        raise EvidenceUnavailable(f"cannot read the stored previews ({error})") from error
    try:
        evidence["previews"] = await stored_previews(conn, tenant, tx_id, evidence["commands"])
    finally:
        await conn.close()
    return bundle


async def bundle_from_log(
    log: PartitionReader, topics: Topics, tenant: str, tx_id: str, hint: Known | None
) -> dict[str, Any]:
    """The bundle of what the log holds: its `evidence.previews` is `[]`, for the caller
    to fill from the preview store (`stored_previews`). With `hint`, only the transaction's
    window of each partition is read (services.cli.transaction_window)."""
    key = partition_key(tenant, tx_id)
    tx = Transaction(tenant, tx_id)
    # Every partition first: a read assigns its partition, after which the consumer's
    # metadata may no longer hold the other topics.
    events_tp = log.partition_of(topics.events, key)
    commands_tp = log.partition_of(topics.commands, key)
    observations_tp = log.partition_of(topics.observations, key)
    try:
        checkpoints_tp: TopicPartition | None = log.partition_of(topics.checkpoints, key)
    except AuditError:  # a log written before checkpoints
        checkpoints_tp = None
    events = await events_of(log, events_tp, tx, hint)
    if not events:
        raise AuditError(f"tx {tx_id} of tenant {tenant}: no events on {topics.events}")
    inputs = await inputs_of(log, [commands_tp, observations_tp], tx, events, hint)
    checkpoint = await _covering_checkpoint(log, checkpoints_tp, tx, events)
    return {
        "format": FORMAT,
        "tenant": tenant,
        "tx_id": tx_id,
        "events": sorted(_bodies(events), key=lambda e: e.get("seq", 0)),
        "checkpoint": checkpoint,
        "evidence": {
            "commands": _bodies(inputs[commands_tp]),
            "observations": _bodies(inputs[observations_tp]),
            "previews": [],
        },
    }


class EvidenceUnavailable(AuditError):
    """A store the bundle copies evidence from cannot be read (not: the transaction is not
    there), so the receipt route answers 503, not 404."""


def bound_digests(commands: list[dict[str, Any]]) -> list[str]:
    """The preview digests the transaction's approvals bound to, in log order, once each."""
    digests = [
        c["preview_digest"]
        for c in commands
        if c.get("type") == "ApproveOperation" and isinstance(c.get("preview_digest"), str)
    ]
    return list(dict.fromkeys(digests))


async def stored_previews(
    conn: asyncpg.Connection, tenant: str, tx_id: str, commands: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The previews (POST /v1/previews, as the approver was shown them) that the approvals
    bound to, copied from the intake's preview store. The approval itself carries the
    steps its digest covers, so a preview the store no longer keeps (PREVIEW_RETENTION_S)
    is still checkable from the command; this is the document as served."""
    digests = bound_digests(commands)
    rows = await conn.fetch(
        "SELECT preview_id, digest, body::text AS body, created_at FROM previews"
        " WHERE tenant = $1 AND tx_id = $2 AND digest = ANY($3::text[])",
        tenant,
        tx_id,
        digests,
    )
    order = {digest: i for i, digest in enumerate(digests)}
    return [
        {
            "preview_id": row["preview_id"],
            "preview_digest": row["digest"],
            "created_at": row["created_at"].isoformat(),
            "preview": json.loads(row["body"]),
        }
        for row in sorted(rows, key=lambda r: (order[r["digest"]], r["preview_id"]))
    ]


async def _covering_checkpoint(
    log: PartitionReader, tp: TopicPartition | None, tx: Transaction, events: list[Found]
) -> dict[str, Any] | None:
    """The checkpoint signing the transaction's latest head (None on a log written before
    checkpoints, where the topic may not exist): the last one on the partition naming the
    transaction, since the seqs a decider signs only grow.

    Read in a window: the checkpoint of the last event's head is written with it (a
    transaction's end) or within RECON_CHECKPOINT_INTERVAL_S of it, so it is stamped
    within SLACK_MS of the last event; and no checkpoint names the transaction before its
    first event. The window is widened (towards both, and to the partition's end) until it
    holds the last event's head or reaches those bounds: a head never signed (a decider
    that crashed before its checkpoint, and nothing decided since) leaves the latest signed
    one before it, found by the widening."""
    if tp is None:
        return None
    last_seq = max(body.get("seq", 0) for _, body in events)
    first_ms = min(r.timestamp for r, _ in events)
    last_ms = max(r.timestamp for r, _ in events)
    earliest = await log.offset_at(tp, first_ms - SLACK_MS)
    slack = SLACK_MS
    while True:
        start = max(earliest, await log.offset_at(tp, last_ms - slack))
        stop = await log.offset_at(tp, last_ms + slack)
        best = _latest_head(tx, (await log.read(tp, start, stop, tx.mentions))[0])
        if (best is not None and best[0] == last_seq) or (
            start == earliest and stop == await log.end(tp)
        ):
            return None if best is None else best[1]
        slack *= 4


def _latest_head(tx: Transaction, records: list[Record]) -> tuple[int, dict[str, Any]] | None:
    """(seq, checkpoint) of the last of `records` signing the transaction's latest head."""
    best: tuple[int, dict[str, Any]] | None = None
    for record in records:
        try:
            checkpoint = json.loads(record.value or b"")
            seqs = [
                h["seq"]
                for h in checkpoint["heads"]
                if (h["tenant"], h["tx_id"]) == (tx.tenant, tx.tx_id)
            ]
        except (ValueError, KeyError, TypeError):
            continue  # audit verify reports what is not a checkpoint
        if seqs and (best is None or max(seqs) >= best[0]):
            best = (max(seqs), checkpoint)
    return best


async def run_bundle(settings: Settings, tenant: str | None, tx_id: str, out: str | None) -> int:
    bundle = await build_bundle(settings, tenant, tx_id)
    text = json.dumps(bundle, indent=2, ensure_ascii=False) + "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        with open(out, "w", encoding="utf-8") as file:  # noqa: ASYNC230 (one small file, at the end)
            file.write(text)
        verdict = verify_bundle(bundle, verify_keys(settings.environment))
        print(f"audit bundle: wrote {out} ({len(bundle['events'])} events, {verdict.verdict})")
    return 0


def run_verify_bundle(settings: Settings, path: str, as_json: bool) -> int:
    try:
        bundle = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise AuditError(f"cannot read bundle {path}: {error}") from error
    verdict = verify_bundle(bundle, verify_keys(settings.environment))
    if as_json:
        print_json({"file": path, **verdict.as_json()})
    else:
        forms = ", ".join(verdict.canonical_forms) or "none"
        line = f"{path}: {verdict.verdict.value} (canonical forms: {forms}"
        line += f"; signed up to seq {verdict.signed_seq})" if verdict.signed_seq else ")"
        print(line if verdict.problem is None else f"{line}: {verdict.problem}")
    return exit_code(verdict.verdict)
