"""The SDK's models against the published OpenAPI document (docs/openapi.json, itself checked
against the code by test_published_schemas.py): a field the API gains or drops that the SDK
does not follow fails here, and so does a public route without an SDK call."""

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from recon_sdk import (
    AbortRequested,
    Accepted,
    AsyncRecon,
    Claimed,
    Compensation,
    Event,
    KillSwitch,
    Operation,
    Owner,
    Recon,
    ReviewResolving,
    Transaction,
    TransactionRequest,
)
from recon_sdk.models import OperationKey, OperationView, StepSummary, TransactionSummary

OPENAPI = json.loads((Path(__file__).parents[2] / "docs" / "openapi.json").read_text())
SCHEMAS: dict[str, Any] = OPENAPI["components"]["schemas"]

# SDK model -> the API's schema of the same shape.
PAIRS: list[tuple[type[BaseModel], str]] = [
    (TransactionRequest, "SubmissionRequest"),
    (Operation, "OperationRequest"),
    (Compensation, "CompensationRequest"),
    (Accepted, "SubmissionAccepted"),
    (OperationKey, "OperationKey"),
    (Owner, "OwnerSession"),
    (Transaction, "TransactionView"),
    (OperationView, "OperationView"),
    (TransactionSummary, "TransactionSummary"),
    (StepSummary, "StepSummary"),
    (AbortRequested, "AbortRequested"),
    (ReviewResolving, "ReviewResolving"),
    (Claimed, "ClaimAnswer"),
    (KillSwitch, "KillSwitchView"),
]

# The one call of each client per public route (webhooks and the health check are for
# providers and load balancers, not agents).
ROUTES: dict[tuple[str, str], str] = {
    ("post", "/v1/transactions"): "submit",
    ("get", "/v1/transactions"): "transactions",
    ("get", "/v1/transactions/{tx_id}"): "get",
    ("get", "/v1/transactions/{tx_id}/events"): "events",
    ("get", "/v1/transactions/{tx_id}/receipt"): "receipt",
    ("post", "/v1/transactions/{tx_id}/abort"): "abort",
    ("post", "/v1/transactions/{tx_id}/claim"): "claim",
    ("post", "/v1/transactions/{tx_id}/release"): "release",
    ("post", "/v1/transactions/{tx_id}/review"): "request_review",
    ("get", "/v1/reviews"): "reviews",
    ("get", "/v1/reviews/{review_id}"): "review",
    ("post", "/v1/reviews/{review_id}/resolve"): "resolve",
    ("get", "/v1/drift"): "drift",
    ("get", "/v1/operations/{op_key}"): "operation",
    ("get", "/v1/policy"): "policy",
    ("put", "/v1/policy"): "set_policy",
    ("get", "/v1/quotas"): "quotas",
    ("post", "/v1/quotas/breakers/reset"): "reset_breaker",
    ("get", "/v1/kill-switches"): "kill_switches",
    ("post", "/v1/kill-switches"): "engage_kill_switch",
    ("delete", "/v1/kill-switches/{switch_id}"): "release_kill_switch",
    ("post", "/v1/previews"): "preview",
    ("post", "/v1/approvals"): "approve",
    ("post", "/v1/approvals/{op_key}/reject"): "reject_approval",
    ("get", "/v1/catalog"): "catalog",
}
NOT_FOR_AGENTS = {
    "/healthz",
    "/v1/webhooks/{provider}",
    "/v1/webhooks/{provider}/accounts/{tenant}",
}


def fields(model: type[BaseModel]) -> set[str]:
    return {info.alias or name for name, info in model.model_fields.items()}


@pytest.mark.parametrize(("model", "schema"), PAIRS, ids=[s for _, s in PAIRS])
def test_an_sdk_model_has_the_fields_of_its_api_schema(model: type[BaseModel], schema: str) -> None:
    assert fields(model) == set(SCHEMAS[schema]["properties"]), (
        f"recon_sdk {model.__name__} and the API's {schema} differ: "
        "add the field to both (sdk/recon_sdk/models.py)"
    )


def test_every_public_route_has_a_call_in_both_clients() -> None:
    routes = {
        (method, path)
        for path, methods in OPENAPI["paths"].items()
        # Each provider's own webhook route (services.intake.openapi_catalog) is a provider's.
        if path not in NOT_FOR_AGENTS and not path.startswith("/v1/webhooks/")
        for method in methods
    }
    assert routes == set(ROUTES), "a route without an SDK call (or a call for a gone route)"
    for name in ROUTES.values():
        assert callable(getattr(AsyncRecon, name)) and callable(getattr(Recon, name)), name


def test_the_sdk_event_reads_the_api_event() -> None:
    # Answers allow extra fields; the ones the SDK types must be the API's.
    assert fields(Event) <= set(SCHEMAS["EventView"]["properties"])
