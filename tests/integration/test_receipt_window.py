"""What one receipt costs the intake (docs/receipts.md, "What a bundle reads"), on real
Kafka and Postgres: it reads the transaction's window of its partitions, not the
partitions, and at most RECON_RECEIPT_CONCURRENCY are built at once.

The log is the audit benchmark's (the real decider's events, their inputs, the checkpoints
signed with the development key), with Kafka timestamps an hour apart between the
transaction and the others of its partitions, so that its window holds its own records and
nothing else, and the projection is `audit rebuild`'s."""

import dataclasses
import json
from datetime import UTC, datetime, timedelta

from prometheus_client import REGISTRY
from support.intake_app import intake_client, intake_settings
from support.synthetic_records import produce

from events.checkpoint import CheckpointChain
from events.keys import partition_key
from services.cli.audit_bundle import build_bundle
from services.cli.audit_rebuild import rebuild
from services.config import Settings
from services.devtools.synthetic_log import (
    STEP_MS,
    Produced,
    partition_of,
    transaction_records,
    tx_coordinates,
)
from services.intake.app import create_app

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/unreachable"

# Read by a receipt: the windows of these topics (decider_state is not).
READ = ("events", "commands", "observations", "checkpoints")


def _records_read() -> float:
    return REGISTRY.get_sample_value("recon_receipt_records_read_total") or 0.0


async def _log_around(settings: Settings, target: int, others: int) -> list[Produced]:
    """`others` transactions an hour before transaction `target` and `others` an hour
    after it, on every partition; every record produced, in order."""
    now = datetime.now(UTC)

    def start(index: int, hours_ago: int) -> datetime:
        return now - timedelta(hours=hours_ago, milliseconds=index * STEP_MS)

    groups = [
        [(i, start(0, 3)) for i in range(others)],
        [(target, start(target, 2))],
        [(i, start(target + 1, 1)) for i in range(target + 1, target + 1 + others)],
    ]
    chains: dict[int, CheckpointChain] = {}
    produced = [
        r
        for group in groups
        for index, at in group
        for r in transaction_records(index, at, 2, chains)
    ]
    await produce(settings.kafka_bootstrap, settings.topics, produced, READ)
    return produced


async def _projected(settings: Settings) -> None:
    """The log projected into the settings' (empty, migrated) database, as `audit rebuild`."""
    conn = await rebuild(
        dataclasses.replace(settings, database_url=UNREACHABLE), settings.database_url, 0
    )
    await conn.close()


def _bodies(records: list[Produced], role: str) -> list[dict[str, object]]:
    return [json.loads(r.value) for r in records if r.role == role]


async def test_a_receipt_reads_its_transactions_window_not_its_partitions(
    infra: object, fresh_database: str, topic_prefix: str
) -> None:
    target, others = 500, 500
    tenant, tx_id = tx_coordinates(target)
    settings = await intake_settings(
        infra, fresh_database, topic_prefix, api_keys={"key-t": tenant}
    )
    produced = await _log_around(settings, target, others)
    await _projected(settings)
    key = partition_key(tenant, tx_id)
    mine = [r for r in produced if r.key == key]
    its_own = sum(1 for r in mine if r.role in READ)
    # What its partitions hold besides: the others that share them, before and after it.
    sharing = [
        r
        for r in produced
        if r.key != key and r.role in READ and partition_of(r.key) == partition_of(key)
    ]
    assert len(sharing) > 100 * its_own, (len(sharing), its_own)
    before = _records_read()
    async with intake_client(settings) as http:
        receipt = await http.get(
            f"/v1/transactions/{tx_id}/receipt", headers={"Authorization": "Bearer key-t"}
        )
    read = _records_read() - before
    # Reading its partitions from offset 0, as receipts did before windows, read all of them.
    print(
        f"receipt of {tx_id}: {read:.0f} records read of {len(sharing) + its_own} in its partitions"
    )
    assert receipt.status_code == 200, receipt.text
    assert receipt.headers["Recon-Verdict"] == "VALID"
    # Its own records and nothing else: the others are an hour away on either side.
    assert read == its_own, (read, its_own)
    bundle = receipt.json()
    # The content of a read of the whole partitions (no projection: no window) ...
    whole = await build_bundle(
        dataclasses.replace(settings, database_url=UNREACHABLE), tenant, tx_id
    )
    assert bundle == whole
    # ... which is every record of the transaction as it was produced.
    evidence = bundle["evidence"]
    assert bundle["events"] == _bodies(mine, "events")
    assert evidence["commands"] == _bodies(mine, "commands")
    assert evidence["observations"] == _bodies(mine, "observations")
    assert bundle["checkpoint"] == _bodies(mine, "checkpoints")[-1]
    assert evidence["previews"] == []


async def test_receipts_past_the_bound_are_refused_with_retry_after(
    infra: object, fresh_database: str, topic_prefix: str
) -> None:
    target = 3
    tenant, tx_id = tx_coordinates(target)
    settings = await intake_settings(
        infra, fresh_database, topic_prefix, api_keys={"key-t": tenant}, receipt_concurrency=2
    )
    await _log_around(settings, target, 3)
    await _projected(settings)
    app = create_app(settings)
    url = f"/v1/transactions/{tx_id}/receipt"
    auth = {"Authorization": "Bearer key-t"}
    async with intake_client(settings, app) as http:
        slots = app.state.receipt_slots
        with slots.take("receipts"), slots.take("receipts"):  # two being built
            before = _records_read()
            refused = await http.get(url, headers=auth)
            assert refused.status_code == 503, refused.text
            assert refused.headers["Retry-After"] == "1"
            assert refused.json()["error"] == "unavailable"
            assert "retry later" in refused.json()["message"]
            assert _records_read() == before  # refused before it read anything
        # Nothing held: the same request is answered.
        answered = await http.get(url, headers=auth)
        assert answered.status_code == 200, answered.text
        assert answered.headers["Recon-Verdict"] == "VALID"
        assert slots.taken == 0
