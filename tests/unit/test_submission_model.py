"""The submission's own fields, as the model reads JSON: a type the document does not
declare is refused, never coerced (schema fuzzing sends them)."""

from typing import Any

import pytest
from pydantic import ValidationError

from services.intake.submission import SubmissionRequest


def submission(**step_fields: Any) -> dict[str, Any]:
    step = {
        "action": "reserve",
        "provider": "sandbox",
        "operation": "inventory.reserve",
        "payload": {"sku": "sku-1", "qty": 1},
        "resource": "sku-1",
        **step_fields,
    }
    return {"tx_id": "tx-1", "agent_id": "agent-1", "steps": [step]}


@pytest.mark.parametrize("revision", [False, True, "3", 3.0])
def test_an_expected_revision_is_a_json_integer(revision: Any) -> None:
    # pydantic's lax int reads false as revision 0: a check against a revision the agent
    # never named.
    with pytest.raises(ValidationError):
        SubmissionRequest.model_validate(submission(expected_revision=revision))


def test_an_integer_revision_is_taken() -> None:
    model = SubmissionRequest.model_validate(submission(expected_revision=3))
    assert model.steps[0].expected_revision == 3
