"""The default chaos run (`make chaos`, smaller): mixed transactions through the real stack
while a seeded nemesis kill -9s recon processes, restarts the test session's own Kafka broker
and Postgres and arms sandbox faults; then every promise is checked over the whole history."""

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Infra

from services.devtools.chaos.checks import table
from services.devtools.chaos.run import ChaosConfig, run_chaos
from services.devtools.stack import Stack

# Sized for `make test` on a loaded 2-core machine (a few minutes); `make chaos` runs more.
# RECON_CHAOS_SEED replays a failing run; otherwise each run draws a seed (printed).
TRANSACTIONS = 150
FAULTS = 12


@pytest.mark.timeout(480)
async def test_chaos_run_loses_nothing_duplicates_nothing_and_audits_clean(
    infra: Infra,
    fresh_database: str,
    topic_prefix: str,
    tmp_path: Path,
    free_port: Callable[[], int],
) -> None:
    stack = Stack(
        kafka_bootstrap=infra.kafka_bootstrap,
        database_url=fresh_database,
        log_dir=tmp_path / "logs",
        topic_prefix=topic_prefix,
        intake_port=free_port(),
        sandbox_port=free_port(),
    )
    seed = os.environ.get("RECON_CHAOS_SEED")
    config = ChaosConfig(TRANSACTIONS, FAULTS, int(seed) if seed else None)
    verdict, history = await run_chaos(config, stack, infra.kafka, infra.postgres)
    report = table(verdict, examples=10)
    print(report)
    for note in history.notes:
        print(f"note: {note}")
    assert verdict.ok, (
        f"{report}\n{history.audit_verify_output[-2000:]}\n"
        + (history.rebuild_compare_output[-2000:])
    )
    assert verdict.answered == TRANSACTIONS
    # The mix really ran: both kinds of ending happened.
    assert verdict.outcomes.get("committed", 0) > 0 and verdict.outcomes.get("compensated", 0) > 0
