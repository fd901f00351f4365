"""The Prometheus alert rules and the Grafana dashboard that ship in compose/ name only
metrics recon exports (services.metrics), and every rule says what to do (`runbook`): a
renamed metric must fail here, not leave an alert that can never fire."""

import json
import re
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

import services.metrics  # registers every family
from services.intake.group_progress import STUCK_AFTER_S
from services.intake.group_watch import STALLED_AFTER_S

COMPOSE = Path(__file__).resolve().parents[2] / "compose"
METRIC = re.compile(r"\brecon_[a-z_]+\b")


def _exported() -> set[str]:
    names: set[str] = set()
    for family in REGISTRY.collect():
        if not family.name.startswith("recon_"):
            continue
        names.add(family.name)
        if family.type == "counter":
            names.add(f"{family.name}_total")
        if family.type == "histogram":
            names |= {f"{family.name}_{part}" for part in ("bucket", "count", "sum")}
    return names


def _rules() -> list[dict[str, object]]:
    document = yaml.safe_load((COMPOSE / "prometheus" / "alerts.yml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_every_alert_names_exported_metrics_and_has_a_runbook() -> None:
    exported = _exported()
    rules = _rules()
    assert len([rule for rule in rules if "alert" in rule]) >= 8
    for rule in rules:
        named = set(METRIC.findall(str(rule["expr"])))
        assert named <= exported, (rule.get("alert", rule.get("record")), named - exported)
        if "alert" in rule:
            annotations = rule["annotations"]
            assert isinstance(annotations, dict) and len(annotations.get("runbook", "")) > 40, rule


# A counter's count over a window, as every rule must take it (alerts.yml's header): a
# series that was not there at the window's start counted whole, since a labelled
# counter's series appears at its first increment, at 1, which increase() cannot see.
COUNTED = re.compile(
    r"(?:sum by \((?P<by>[a-z_, ]+)\) )?\(?\((?P<counter>recon_[a-z_]+_total) unless (?P=counter)"
    r" offset (?P<window>\d+m)\)\s+or increase\((?P=counter)\[(?P=window)\]\)\)?"
)


def test_every_count_over_a_window_counts_a_new_series_first_increment() -> None:
    rules = _rules()
    recorded = {str(rule["record"]): str(rule["expr"]) for rule in rules if "record" in rule}
    for name, expr in recorded.items():
        found = COUNTED.fullmatch(expr)
        assert found, (name, "not the one form of a count over a window")
        # Named level:metric:operation, so that a reader of an alert knows what it reads.
        labels = found["by"].replace(", ", "_") if found["by"] else None
        assert name.split(":") == [
            labels or name.split(":")[0],
            found["counter"].removesuffix("_total"),
            f"increase{found['window']}",
        ], name
    for rule in rules:
        if "alert" in rule:
            assert "increase(" not in str(rule["expr"]), (rule["alert"], "read a recorded count")


def test_the_alerts_watch_what_issue_25_asks_for() -> None:
    watched = {name for rule in _rules() for name in METRIC.findall(str(rule["expr"]))}
    assert watched >= {
        "recon_oldest_unknown_operation_seconds",
        "recon_oldest_open_review_seconds",
        "recon_dead_letters_total",
        "recon_accepted_to_committed_seconds_bucket",
        "recon_http_requests_total",
        "recon_consumer_lag",
        "recon_consumer_group_unsettled_seconds",
        "recon_consumer_group_stuck_seconds",
    }


def test_the_consumer_group_alerts_page_where_healthz_fails() -> None:
    # The thresholds are the group watch's (services.intake.group_watch.verdict): an alert
    # at another number would page while /healthz says ok, or the reverse.
    thresholds = {
        "ReconConsumerGroupStalled": STALLED_AFTER_S,
        "ReconConsumerGroupNotAdvancing": STUCK_AFTER_S,
    }
    for rule in _rules():
        if rule.get("alert") in thresholds:
            found = re.fullmatch(r".*>= (\d+)", str(rule["expr"]))
            assert found and float(found[1]) == thresholds[str(rule["alert"])], rule


def test_every_dashboard_panel_queries_exported_metrics() -> None:
    exported = _exported()
    dashboard = json.loads((COMPOSE / "grafana" / "recon.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            named = set(METRIC.findall(target["expr"]))
            assert named and named <= exported, (panel["title"], named - exported)


def test_prometheus_scrapes_every_recon_process_on_its_default_port() -> None:
    config = yaml.safe_load((COMPOSE / "prometheus" / "prometheus.yml").read_text())
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "recon"]
    targets = set(job["static_configs"][0]["targets"])
    assert targets == {f"{name}:{port}" for name, port in services.metrics.DEFAULT_PORTS.items()}
