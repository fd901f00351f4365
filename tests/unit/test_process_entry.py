"""Every recon process starts through lifecycle.run_process, so a malformed setting stops
each of them the same way: exit code 2 and one line naming the process and the variable,
before anything touches Kafka or Postgres."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = {
    "decider": "services.decider",
    "intake": "services.intake",
    "projector": "services.projector",
    "reconciler": "services.pull_reconciler",
    "saga": "services.saga",
    "intents": "services.intake.kafka_intents",
}


@pytest.mark.parametrize(
    "variable",
    ["RECON_INTAKE_PORT", "RECON_LOG_LEVEL", "RECON_METRICS_PORT", "RECON_EVENT_LOOP"],
)
@pytest.mark.parametrize("name", sorted(PROCESSES))
def test_a_malformed_setting_stops_every_process_alike(name: str, variable: str) -> None:
    env = {**os.environ, variable: "not-a-value"}
    done = subprocess.run(
        [sys.executable, "-m", PROCESSES[name]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"{name}: configuration error: {variable}"), done.stderr
