"""The intake's OpenAPI document is one clients can generate an SDK from (issue 7, item 16):
every reference resolves, every body a route reads is declared, and every refusal is
declared with the API's `{"error", "message"}` body. The app is built, not started: the
document needs no broker or database."""

from typing import Any

import pytest

from services.config import load_settings
from services.intake.app import create_app

ERROR_BODY = {"$ref": "#/components/schemas/ErrorBody"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    app = create_app(load_settings())
    openapi: dict[str, Any] = app.openapi()
    return openapi


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def _resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), f"{ref} points outside the document"
    node: Any = document
    for part in ref[2:].split("/"):
        assert isinstance(node, dict) and part in node, f"{ref} does not resolve"
        node = node[part]
    return node


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]


def test_every_reference_in_the_document_resolves(document: dict[str, Any]) -> None:
    refs = _refs(document)
    assert "#/components/schemas/SubmissionRequest" in refs
    for ref in refs:
        _resolve(document, ref)


@pytest.mark.parametrize(
    ("method", "path", "required", "model"),
    [
        ("POST", "/v1/transactions", True, "SubmissionRequest"),
        ("POST", "/v1/reviews/{review_id}/resolve", True, "ResolveRequest"),
        ("POST", "/v1/transactions/{tx_id}/abort", False, "AbortRequest"),
        ("POST", "/v1/webhooks/{provider}", True, "WebhookNotice"),
        ("POST", "/v1/previews", True, "SubmissionRequest"),
        ("POST", "/v1/approvals", True, "ApprovalRequest"),
        ("POST", "/v1/approvals/{op_key}/reject", False, "RejectionRequest"),
    ],
)
def test_every_route_that_reads_a_body_declares_it(
    document: dict[str, Any], method: str, path: str, required: bool, model: str
) -> None:
    body = document["paths"][path][method.lower()]["requestBody"]
    assert body["required"] is required
    schema = body["content"]["application/json"]["schema"]
    assert schema == {"$ref": f"#/components/schemas/{model}"}


def test_every_refusal_is_declared_with_the_error_body(document: dict[str, Any]) -> None:
    for method, path, operation in _operations(document):
        responses = operation["responses"]
        keyed = operation.get("security") == [{"apiKey": []}]
        if path.startswith("/v1/") and "webhooks" not in path:
            assert keyed, f"{method} {path} does not declare the API key"
            assert "401" in responses, f"{method} {path} does not declare 401"
        if path != "/healthz":
            assert "503" in responses, f"{method} {path} does not declare 503"
        for status, response in responses.items():
            if status.startswith(("4", "5")) and path != "/healthz":
                schema = response["content"]["application/json"]["schema"]
                assert schema == ERROR_BODY, f"{method} {path} {status}: {schema}"
        # FastAPI's own validation error shape is never what the intake answers.
        assert "HTTPValidationError" not in str(responses), f"{method} {path}"


def test_routes_with_a_missing_resource_or_a_body_declare_404_409_413(
    document: dict[str, Any],
) -> None:
    for method, path, operation in _operations(document):
        responses = operation["responses"]
        if "{" in path:
            assert "404" in responses, f"{method} {path} does not declare 404"
        if "requestBody" in operation:
            assert "413" in responses, f"{method} {path} does not declare 413"
            assert "422" in responses, f"{method} {path} does not declare 422"
    for conflict in ("/v1/transactions", "/v1/transactions/{tx_id}/abort"):
        assert "409" in document["paths"][conflict]["post"]["responses"]
    assert "409" in document["paths"]["/v1/reviews/{review_id}/resolve"]["post"]["responses"]


def test_older_than_s_is_bounded(document: dict[str, Any]) -> None:
    (older_than,) = [
        p
        for p in document["paths"]["/v1/reviews"]["get"]["parameters"]
        if p["name"] == "older_than_s"
    ]
    bounds = older_than["schema"]["anyOf"][0]
    assert bounds["minimum"] == 0
    # Past a date Python can represent, the subtraction raised (a 500); now a 422.
    assert bounds["maximum"] <= 10**10


def test_every_success_answer_has_a_named_shape(document: dict[str, Any]) -> None:
    for method, path, operation in _operations(document):
        successes = {s: r for s, r in operation["responses"].items() if s.startswith("2")}
        assert successes, f"{method} {path} declares no success answer"
        for status, response in successes.items():
            schema = response["content"]["application/json"]["schema"]
            assert set(schema) == {"$ref"}, f"{method} {path} {status}: {schema}"
