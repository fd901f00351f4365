"""One builder of an OperationObserved (events.observation): every observer, the webhook
ingestion, the synthetic log and the tests' builders included, goes through it, so a field
added to a sighting reaches the decider the same way from each of them."""

import ast
from datetime import UTC, datetime
from pathlib import Path

from events.inputs import OperationObserved, Outcome, Source
from events.keys import webhook_id
from reconcilers.webhook_intake import MatchedOperation, meaning
from reconcilers.webhook_reading import EffectNotice

ROOT = Path(__file__).resolve().parents[2]
BUILDER = ROOT / "events/observation.py"
FOLDERS = ("events", "transactions", "projections", "reconcilers", "services", "tests")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _builds_by_hand(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == "OperationObserved":
                return True
    return False


def test_no_module_but_the_builder_constructs_an_observation() -> None:
    by_hand = [
        str(path.relative_to(ROOT))
        for folder in FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != BUILDER and _builds_by_hand(path)
    ]
    assert by_hand == []
    assert _builds_by_hand(BUILDER)


def test_a_webhook_is_a_sighting_of_attempt_zero_with_the_effect_as_its_evidence() -> None:
    effect = {"id": "ch_1", "idempotency_key": "rk1_a", "status": "succeeded"}
    notice = EffectNotice(
        effect=effect,
        effect_id="ch_1",
        keys=("rk1_a",),
        claimed_op_key="rk1_a",
    )
    op = MatchedOperation(tenant="demo", tx_id="tx-1", action="charge", op_key="rk1_a")

    # Pinned field by field, as the webhook built it before it used the builder: a webhook
    # proves the effect exists and nothing else (no status, no dispatcher's word).
    sighting = meaning("sandbox", None, "msg_1", notice, op, NOW)
    assert isinstance(sighting, OperationObserved)
    assert sighting.model_dump(mode="json") == {
        "type": "OperationObserved",
        "schema_version": 1,
        "message_id": webhook_id("sandbox", "msg_1"),
        "tenant": "demo",
        "tx_id": "tx-1",
        "action": "charge",
        "op_key": "rk1_a",
        "attempt": 0,
        "source": Source.WEBHOOK.value,
        "outcome": Outcome.SUCCEEDED.value,
        "status_code": None,
        "remote_id": "ch_1",
        "body": effect,
        "error": None,
        "observed_at": NOW.isoformat().replace("+00:00", "Z"),
        "by_dispatcher": False,
    }
