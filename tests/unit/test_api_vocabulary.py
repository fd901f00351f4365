"""One vocabulary from the decider to the API (issue 19, item 5): the states the published
OpenAPI document lists are events.definition's, field by field, and the SDK, which cannot
import recon, spells the same sets.

A state added to TxStatus or OpStatus reaches the document by itself (the models declare
the enums); this test fails if an answer's field falls back to a bare string, or a copy of
a set drifts from the one definition."""

from enum import StrEnum
from typing import Any, get_args

import pytest
import recon_sdk.models as sdk

from events.catalog import Reversibility, SideEffect
from events.definition import (
    FINISHED,
    Leg,
    OperationKind,
    OpStatus,
    Resolution,
    ReviewState,
    TxStatus,
)
from events.drift import DriftKind
from services.contract.schemas import openapi_document

# (schema, property) -> the one definition of the states it holds.
TYPED: dict[tuple[str, str], type[StrEnum]] = {
    ("TransactionView", "status"): TxStatus,
    ("OperationView", "state"): OpStatus,
    ("OperationView", "kind"): OperationKind,
    ("OperationRecord", "state"): OpStatus,
    ("OperationRecord", "transaction_status"): TxStatus,
    ("OperationRecord", "leg"): Leg,
    ("ApprovedOperation", "kind"): OperationKind,
    ("ReviewSummary", "state"): ReviewState,
    ("ReviewView", "state"): ReviewState,
    ("ReviewView", "leg"): Leg,
    ("ReviewView", "resolution"): Resolution,
    ("ReviewResolving", "resolution"): Resolution,
    ("DriftView", "kind"): DriftKind,
    ("CatalogEntry", "class"): SideEffect,
    ("CatalogEntry", "reversibility"): Reversibility,
}


@pytest.fixture(scope="module")
def schemas() -> dict[str, Any]:
    # The document as the code generates it (test_published_schemas holds docs/ to it).
    components: dict[str, Any] = openapi_document()["components"]["schemas"]
    return components


def _states(schemas: dict[str, Any], prop: dict[str, Any]) -> list[str]:
    """The enum a property's schema lists, through a $ref and an optional null."""
    for option in prop.get("anyOf", [prop]):
        if "$ref" in option:
            enum: list[str] = schemas[option["$ref"].rsplit("/", 1)[1]]["enum"]
            return enum
    return []


@pytest.mark.parametrize(("schema", "field"), sorted(TYPED), ids="{0[0]}.{0[1]}".format)
def test_each_state_field_of_the_document_lists_the_one_definition(
    schemas: dict[str, Any], schema: str, field: str
) -> None:
    prop = schemas[schema]["properties"][field]
    assert _states(schemas, prop) == [s.value for s in TYPED[(schema, field)]]


def test_a_submission_is_answered_accepted_and_nothing_else(schemas: dict[str, Any]) -> None:
    assert schemas["SubmissionAccepted"]["properties"]["status"]["const"] == TxStatus.ACCEPTED


def test_the_sdk_spells_the_same_sets() -> None:
    # The SDK is installed on its own and imports nothing of recon: its copies are held to
    # the one definition here.
    assert sorted(get_args(sdk.TxStatus)) == sorted(TxStatus)
    assert sorted(get_args(sdk.Resolution)) == sorted(Resolution)
    assert sdk.TERMINAL == set(FINISHED)
    # What only a person can move on: wait() returns there rather than spin to its timeout.
    assert sdk.NEEDS_PERSON == {TxStatus.AWAITING_APPROVAL, TxStatus.MANUAL_REVIEW}
    assert sdk.SETTLED == {*FINISHED, *sdk.NEEDS_PERSON}
