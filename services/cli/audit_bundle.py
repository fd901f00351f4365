"""`audit bundle --tx TX_ID` and `audit verify-bundle FILE` (docs/receipts.md, "Evidence
bundles").

A bundle is one transaction's evidence in one JSON file an auditor checks without recon
(events.bundle gives the verdict; verifier-go/ is a second verifier): its events in seq
order, the latest signed checkpoint of its head, the records its events were decided from
(the submission and approvals on recon.commands; every provider answer, lookup and webhook
on recon.observations, a webhook with its signature headers and raw body as received) and
the previews its approvals bound to (the intake's preview store). It reads only the
transaction's partition of each topic (the producers' partitioner on the key tenant/tx_id),
all of it: a bundle is made once per request of an auditor, not on a hot path.
"""

import json
import sys
from pathlib import Path
from typing import Any

import asyncpg
from aiokafka.structs import TopicPartition

from events.bundle import FORMAT, verify_bundle
from events.keys import partition_key
from services.cli.audit_timeline import _ask_projection
from services.cli.log_snapshot import AuditError
from services.cli.partition_reader import PartitionReader, Record, open_reader
from services.cli.verdict import exit_code, print_json
from services.config import Settings
from services.signing_keys import verify_keys


async def _tenant_of(settings: Settings, tenant: str | None, tx_id: str) -> str:
    if tenant is not None:
        return tenant
    known = await _ask_projection(settings.database_url, settings.topics.events, None, tx_id)
    tenants = sorted({k.tenant for k in known})
    if len(tenants) != 1:
        found = ", ".join(tenants) or "no tenant the projection knows"
        raise AuditError(f"tx {tx_id}: {found}; name the tenant with --tenant")
    return tenants[0]


def _bodies(records: list[Record]) -> list[dict[str, Any]]:
    return [json.loads(r.value or b"") for r in records]


async def build_bundle(settings: Settings, tenant: str | None, tx_id: str) -> dict[str, Any]:
    topics = settings.topics
    tenant = await _tenant_of(settings, tenant, tx_id)
    key = partition_key(tenant, tx_id)

    def mine(record: Record) -> bool:
        try:
            body = json.loads(record.value or b"")
        except ValueError:
            return False
        return isinstance(body, dict) and (body.get("tenant"), body.get("tx_id")) == (
            tenant,
            tx_id,
        )

    wanted = [topics.events, topics.commands, topics.observations, topics.checkpoints]
    async with open_reader(settings.kafka_bootstrap, wanted) as log:
        # Every partition first: a read assigns its partition, after which the consumer's
        # metadata may no longer hold the other topics.
        events_tp = log.partition_of(topics.events, key)
        inputs = {
            name: log.partition_of(topic, key)
            for name, topic in (
                ("commands", topics.commands),
                ("observations", topics.observations),
            )
        }
        try:
            checkpoints_tp: TopicPartition | None = log.partition_of(topics.checkpoints, key)
        except AuditError:  # a log written before checkpoints
            checkpoints_tp = None
        events = _bodies((await log.read(events_tp, 0, None, mine))[0])
        if not events:
            raise AuditError(f"tx {tx_id} of tenant {tenant}: no events on {topics.events}")
        evidence = {
            name: _bodies((await log.read(tp, 0, None, mine))[0]) for name, tp in inputs.items()
        }
        checkpoint = await _covering_checkpoint(log, checkpoints_tp, tenant, tx_id)
    events.sort(key=lambda e: e.get("seq", 0))
    evidence["previews"] = await _bound_previews(
        settings.database_url, tenant, tx_id, evidence["commands"]
    )
    return {
        "format": FORMAT,
        "tenant": tenant,
        "tx_id": tx_id,
        "events": events,
        "checkpoint": checkpoint,
        "evidence": evidence,
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


async def _bound_previews(
    database_url: str, tenant: str, tx_id: str, commands: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The previews (POST /v1/previews, as the approver was shown them) that the approvals
    bound to, copied from the intake's preview store. The approval itself carries the
    steps its digest covers, so a preview the store no longer keeps (PREVIEW_RETENTION_S)
    is still checkable from the command; this is the document as served."""
    digests = bound_digests(commands)
    if not digests:
        return []
    try:
        conn = await asyncpg.connect(database_url, timeout=3)
    except (TimeoutError, OSError, asyncpg.PostgresError) as error:
        raise EvidenceUnavailable(f"cannot read the stored previews ({error})") from error
    try:
        rows = await conn.fetch(
            "SELECT preview_id, digest, body::text AS body, created_at FROM previews"
            " WHERE tenant = $1 AND tx_id = $2 AND digest = ANY($3::text[])",
            tenant,
            tx_id,
            digests,
        )
    finally:
        await conn.close()
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
    log: PartitionReader, tp: TopicPartition | None, tenant: str, tx_id: str
) -> dict[str, Any] | None:
    """The checkpoint signing the transaction's latest head (None on a log written before
    checkpoints, where the topic may not exist)."""
    if tp is None:
        return None
    best: tuple[int, dict[str, Any]] | None = None

    def covers(record: Record) -> bool:
        return f'"tx_id":"{tx_id}"'.encode() in (record.value or b"")  # a cheap sieve

    for record in (await log.read(tp, 0, None, covers))[0]:
        try:
            checkpoint = json.loads(record.value or b"")
            seqs = [
                h["seq"]
                for h in checkpoint["heads"]
                if (h["tenant"], h["tx_id"]) == (tenant, tx_id)
            ]
        except (ValueError, KeyError, TypeError):
            continue  # audit verify reports what is not a checkpoint
        if seqs and (best is None or max(seqs) >= best[0]):
            best = (max(seqs), checkpoint)
    return best[1] if best else None


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
