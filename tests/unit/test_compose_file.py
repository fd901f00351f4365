"""compose/docker-compose.yml runs the topology `make run` does (services.devtools.stack):
every process as a service of recon's image with a health check, its metrics where
Prometheus scrapes them, and every image a variable defaulting to the public one."""

from pathlib import Path
from typing import Any

import yaml

from services.devtools.stack import MODULES, SERVICES
from services.metrics import DEFAULT_PORTS

COMPOSE = Path(__file__).resolve().parents[2] / "compose"


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())[
        "services"
    ]
    return services


def test_every_process_of_make_run_is_a_service_with_a_health_check() -> None:
    services = _services()
    for name in SERVICES:
        service = services[name]
        assert service["image"] == "recon:dev", name
        assert service["command"][:3] == ["python", "-m", MODULES[name]], name
        assert "healthcheck" in service, name
        assert service["environment"]["RECON_HEALTH_URL"].startswith("http://127.0.0.1:"), name
    assert {"kafka", "postgres", "prometheus", "grafana"} <= set(services)


def test_each_recon_process_is_checked_where_it_serves_metrics() -> None:
    services = _services()
    for name, port in DEFAULT_PORTS.items():
        url = services[name]["environment"]["RECON_HEALTH_URL"]
        expected = "/healthz" if name == "intake" else "/metrics"
        assert url == f"http://127.0.0.1:{8080 if name == 'intake' else port}{expected}", name
        assert services[name]["environment"]["RECON_METRICS_HOST"] == "0.0.0.0", name


def test_every_image_can_be_replaced_by_a_local_one() -> None:
    text = (COMPOSE / "docker-compose.yml").read_text()
    for variable in ("RECON_BASE_IMAGE", "KAFKA_IMAGE", "POSTGRES_IMAGE", "PROMETHEUS_IMAGE"):
        assert f"${{{variable}:-" in text, variable
