"""compose/prometheus/alerts.yml evaluated, not only read (tests/unit/test_alert_rules.py
reads it: the metrics named, the runbooks): Prometheus's own promtool loads the rules as
the compose stack's Prometheus is given them, and runs the series histories beside this
file (`promtool test rules`), each a history of what recon exports in which an alert must
fire, with its labels and after its `for:`, or must not (idle, recovered, the boundary).
A history states each alert's labels and summary (what the series make of it); the runner
adds the rule's runbook, a fixed text test_alert_rules.py checks, which promtool compares
too and which a second copy in every history would only let drift.

promtool is built from source with Go on first use (services.devtools.infra.promtool, as
`make fetch` does): a machine that cannot build it fails here, it never skips, as
stripe-mock's contract tests do. docs/testing.md, "Alert rules".
"""

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.devtools.infra.promtool import ensure_promtool

HERE = Path(__file__).resolve().parent
COMPOSE = HERE.parents[1] / "compose"
RULES = COMPOSE / "prometheus" / "alerts.yml"
HISTORIES = sorted(HERE.glob("*.yml"))
# promtool answers in well under a second; a hang is a failure, not a wait.
PROMTOOL_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def promtool() -> Path:
    return ensure_promtool()


def _run(promtool: Path, *args: str) -> None:
    result = subprocess.run(
        [str(promtool), *args],
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}{result.stderr}"


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _rules() -> dict[str, Any]:
    return {
        rule["alert"]: rule
        for group in _yaml(RULES)["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def _with_runbooks(history: Path, into: Path) -> Path:
    """`history` as promtool is to run it: every expected alert's annotations completed
    with its rule's runbook, the rules named by their absolute path."""
    document = _yaml(history)
    rules = _rules()
    document["rule_files"] = [str((HERE / name).resolve()) for name in document["rule_files"]]
    for case in document["tests"]:
        for check in case["alert_rule_test"]:
            runbook = rules[check["alertname"]]["annotations"]["runbook"]
            for alert in check["exp_alerts"]:
                alert["exp_annotations"] = {**alert["exp_annotations"], "runbook": runbook}
    path = into / history.name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_prometheus_accepts_the_rules(promtool: Path) -> None:
    _run(promtool, "check", "rules", str(RULES))


@pytest.mark.parametrize(
    "files",
    [("docker-compose.yml",), ("docker-compose.yml", "docker-compose.host.yml")],
    ids=["compose", "host-network"],
)
def test_the_compose_prometheus_loads_the_rules_it_is_given(
    promtool: Path, tmp_path: Path, files: tuple[str, ...]
) -> None:
    # The compose stack's Prometheus is never started here (compose_check: no image of it
    # can be built without a registry), so its configuration is checked the way it would
    # load it: the file mounted at its configuration's path, each `rule_files` entry the
    # file mounted there. The host-network file mounts its own configuration in place of
    # the base one (compose merges volumes by their path in the container).
    mounts = {}
    for name in files:
        for volume in _yaml(COMPOSE / name)["services"]["prometheus"].get("volumes", []):
            source, target = volume.split(":")[:2]
            mounts[target] = (COMPOSE / source).resolve()
    config = _yaml(mounts["/etc/prometheus/prometheus.yml"])
    assert [mounts[path] for path in config["rule_files"]] == [RULES]
    config["rule_files"] = [str(mounts[path]) for path in config["rule_files"]]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    _run(promtool, "check", "config", "--syntax-only", str(tmp_path / "prometheus.yml"))


@pytest.mark.parametrize("history", HISTORIES, ids=lambda path: path.stem)
def test_each_alert_fires_where_its_history_says_and_nowhere_else(
    promtool: Path, history: Path, tmp_path: Path
) -> None:
    _run(promtool, "test", "rules", str(_with_runbooks(history, tmp_path)))


def test_every_alert_has_a_history_where_it_fires_and_one_where_it_must_not() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    interval = _yaml(COMPOSE / "prometheus" / "prometheus.yml")["global"]["evaluation_interval"]
    for history in HISTORIES:
        document = _yaml(history)
        # The rules under test are the shipped file, evaluated as often as the compose
        # Prometheus evaluates them: promtool's default (1m) would blur every `for:`.
        assert [(HERE / f).resolve() for f in document["rule_files"]] == [RULES], history
        assert document["evaluation_interval"] == interval, history
        for case in document["tests"]:
            expected: dict[str, list[bool]] = {}
            for check in case["alert_rule_test"]:
                expected.setdefault(check["alertname"], []).append(bool(check["exp_alerts"]))
            for alert, fired in expected.items():
                (fires if any(fired) else quiet).add(alert)
    alerts = set(_rules())
    assert alerts - fires == set(), "alerts no history makes fire"
    assert alerts - quiet == set(), "alerts with no history where they must stay quiet"
