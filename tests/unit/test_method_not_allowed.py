"""A 405 names every method its path supports in `Allow`, also where two routes share a
path (RFC 9110; generated clients and the fuzz test read it). The app is built, not
started: routing answers before any handler touches Kafka or Postgres."""

import pytest
from fastapi.testclient import TestClient

from services.config import load_settings
from services.intake.app import create_app


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("OPTIONS", "/v1/policy", "GET, PUT"),
        ("DELETE", "/v1/policy", "GET, PUT"),
        ("PUT", "/v1/kill-switches", "GET, POST"),
        ("PATCH", "/v1/kill-switches/ks_1", "DELETE"),
        ("DELETE", "/v1/transactions/order-42", "GET"),
    ],
)
def test_a_405_lists_every_method_of_the_path(method: str, path: str, allow: str) -> None:
    client = TestClient(create_app(load_settings()))
    response = client.request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == allow
