"""services.metrics.labelled hands out the child `labels()` would, once made: what it counts
is what the family exposes, for each distinct set of label values."""

from prometheus_client import CollectorRegistry, Counter

from services.metrics import labelled


def test_a_kept_child_counts_into_the_family_as_labels_does() -> None:
    registry = CollectorRegistry()
    family = Counter("t_requests", "test", ["method", "status"], registry=registry)
    labelled(family, "POST", "200").inc()
    labelled(family, "POST", "200").inc()
    family.labels("POST", "200").inc()
    labelled(family, "POST", "503").inc()
    assert labelled(family, "POST", "200") is family.labels("POST", "200")
    assert registry.get_sample_value("t_requests_total", {"method": "POST", "status": "200"}) == 3
    assert registry.get_sample_value("t_requests_total", {"method": "POST", "status": "503"}) == 1
