"""compose/docker-compose.yml runs the topology `make run` does (services.devtools.stack):
every process as a service of recon's image with a health check, its metrics where
Prometheus scrapes them, and every image a variable defaulting to the public one."""

import importlib.util
from pathlib import Path
from typing import Any

import yaml

from services.devtools.compose_check import host_ports
from services.devtools.infra.kafka import JVM_OPTIONS
from services.devtools.stack import MODULES, SERVICES
from services.metrics import DEFAULT_PORTS
from services.stop_bounds import MARGIN_S, stop_grace_s, worst_stop_s

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


def test_every_recon_process_starts_after_the_migrate_step_succeeded() -> None:
    # A process refuses a database behind its schema version (services.migrate), so the
    # one-shot migrate service must have finished, successfully, before any of them starts.
    services = _services()
    migrate = services["migrate"]
    assert migrate["command"] == ["python", "-m", "services.cli", "migrate"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in SERVICES:
        if name == "sandbox":
            continue
        condition = services[name]["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully", name


def test_every_image_can_be_replaced_by_a_local_one() -> None:
    text = (COMPOSE / "docker-compose.yml").read_text()
    for variable in ("RECON_BASE_IMAGE", "KAFKA_IMAGE", "POSTGRES_IMAGE", "PROMETHEUS_IMAGE"):
        assert f"${{{variable}:-" in text, variable


def _host_services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((COMPOSE / "docker-compose.host.yml").read_text())[
        "services"
    ]
    return services


def test_the_host_network_file_moves_every_service_off_make_runs_and_the_tests_ports() -> None:
    """make compose-test runs the stack beside `make run` (its default ports) and the tests
    (services.devtools.ports: 20000 and up), so its ports must be neither."""
    host = _host_services()
    assert set(host) == set(_services()), "every service needs network_mode: host"
    assert all(service["network_mode"] == "host" for service in host.values())
    ports = host_ports()
    taken_by_make_run = {9092, 9093, 5432, 8080, 8090, *DEFAULT_PORTS.values()}
    assert not set(ports.values()) & taken_by_make_run
    assert all(port < 20000 for port in ports.values())
    assert len(set(ports.values())) == len(ports), "two services on one port"
    for name in DEFAULT_PORTS:
        env = host[name]["environment"]
        assert env["RECON_METRICS_PORT"] == str(ports[f"{name} metrics"]), name
        assert env["RECON_HEALTH_URL"].startswith("http://127.0.0.1:"), name


def test_the_host_networks_prometheus_scrapes_each_process_where_it_serves_metrics() -> None:
    """On the host's network the services' names resolve to nothing, and each process
    serves /metrics on 127.0.0.1 at the host file's port: the host variant's Prometheus is
    given a configuration of its own with those targets, the same as prometheus.yml in all
    else, and Grafana asks Prometheus on 127.0.0.1."""
    base = yaml.safe_load((COMPOSE / "prometheus" / "prometheus.yml").read_text())
    host_config = yaml.safe_load((COMPOSE / "prometheus" / "prometheus.host.yml").read_text())
    ports = host_ports()
    [job] = host_config["scrape_configs"]
    assert job["static_configs"][0]["targets"] == [
        f"127.0.0.1:{ports[f'{name} metrics']}" for name in DEFAULT_PORTS
    ]
    for config in (base, host_config):
        del config["scrape_configs"][0]["static_configs"][0]["targets"]
    assert host_config == base
    host = _host_services()
    for name in DEFAULT_PORTS:
        assert host[name]["environment"]["RECON_METRICS_HOST"] == "127.0.0.1", name
    mounted = dict(volume.split(":")[1::-1] for volume in host["prometheus"]["volumes"])
    assert mounted["/etc/prometheus/prometheus.yml"] == "./prometheus/prometheus.host.yml"
    datasources = (
        COMPOSE / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
    ).read_text()
    assert "url: ${RECON_PROMETHEUS_URL}" in datasources
    assert _services()["grafana"]["environment"]["RECON_PROMETHEUS_URL"] == "http://prometheus:9090"
    assert host["grafana"]["environment"]["RECON_PROMETHEUS_URL"] == "http://127.0.0.1:9090"


def test_the_local_kafka_image_reads_the_public_images_variables() -> None:
    """compose/local/kafka turns KAFKA_* variables into properties as apache/kafka does, so the
    compose file configures either image the same way."""
    spec = importlib.util.spec_from_file_location(
        "local_kafka_entrypoint", COMPOSE / "local" / "kafka" / "entrypoint.py"
    )
    assert spec is not None and spec.loader is not None
    entrypoint = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entrypoint)
    assert entrypoint.property_name("KAFKA_NODE_ID") == "node.id"
    assert (
        entrypoint.property_name("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP")
        == "listener.security.protocol.map"
    )
    assert entrypoint.property_name("KAFKA_SOME___DASHED__UNDER") == "some-dashed_under"
    kafka_env = _services()["kafka"]["environment"]
    assert "KAFKA_HEAP_OPTS" in entrypoint.NOT_PROPERTIES and "KAFKA_HEAP_OPTS" in kafka_env


def test_the_compose_broker_runs_with_the_dev_brokers_jvm_options() -> None:
    """One set of broker JVM options, measured once (services.devtools.infra.kafka
    JVM_OPTIONS): the compose broker replaces the image's own with them, and both images
    read KAFKA_JVM_PERFORMANCE_OPTS (the local one's entrypoint, apache/kafka's
    kafka-run-class.sh)."""
    kafka_env = _services()["kafka"]["environment"]
    assert kafka_env["KAFKA_JVM_PERFORMANCE_OPTS"].split() == list(JVM_OPTIONS)
    entrypoint = (COMPOSE / "local" / "kafka" / "entrypoint.py").read_text()
    assert 'os.environ.get("KAFKA_JVM_PERFORMANCE_OPTS"' in entrypoint


def test_every_recon_process_is_given_its_worst_clean_stop_before_it_is_killed() -> None:
    """compose's default grace is 10 s, then SIGKILL: a decider whose broker answers nothing
    takes ~17 s measured, up to its steps' bounds summed (services.stop_bounds)."""
    services = _services()
    for name in SERVICES:
        if name == "sandbox":  # a test double: nothing of recon's to hand over
            continue
        grace = services[name].get("stop_grace_period", "10s")
        assert grace.endswith("s") and grace[:-1].isdigit(), f"{name}: {grace!r}, not whole seconds"
        assert int(grace[:-1]) >= stop_grace_s(name), (
            f"{name}: stop_grace_period {grace}, its worst clean stop {worst_stop_s(name):.0f} s"
            f" + {MARGIN_S:.0f} s needs {stop_grace_s(name)} s (services/stop_bounds.py)"
        )
