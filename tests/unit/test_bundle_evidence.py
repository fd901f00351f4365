"""What a bundle's evidence adds beside the chain (docs/receipts.md, "Evidence bundles"):
the previews approvals bound to, and a webhook's delivery as received, which older records
must not grow."""

from datetime import UTC, datetime

from events.inputs import OperationObserved, Outcome, SignedDelivery, Source
from events.observation import Seen, observation
from services.cli.audit_bundle import bound_digests


def test_the_previews_copied_are_those_the_approvals_bound_to_in_log_order_once() -> None:
    commands = [
        {"type": "SubmitTransaction", "preview_digest": "not-an-approval"},
        {"type": "ApproveOperation", "preview_digest": "d2"},
        {"type": "RejectOperation", "preview_digest": "d9"},
        {"type": "ApproveOperation", "preview_digest": "d1"},
        {"type": "ApproveOperation", "preview_digest": "d2"},
        {"type": "ApproveOperation"},  # a v1 command names none it can be checked by
    ]
    assert bound_digests(commands) == ["d2", "d1"]


def _observed(delivery: SignedDelivery | None = None) -> OperationObserved:
    return observation(
        message_id="webhook:sandbox:evt_1",
        tenant="acme",
        tx_id="tx-1",
        action="charge",
        op_key="rk1_x",
        attempt=0,
        source=Source.WEBHOOK,
        seen=Seen(Outcome.SUCCEEDED),
        observed_at=datetime(2026, 12, 3, tzinfo=UTC),
        delivery=delivery,
    )


def test_an_observation_without_a_delivery_is_written_as_before() -> None:
    assert "delivery" not in _observed().model_dump(mode="json")
    delivery = SignedDelivery(
        scheme="stripe", headers={"stripe-signature": "t=1,v1=ab"}, body_base64="e30="
    )
    dumped = _observed(delivery=delivery).model_dump(mode="json")
    assert dumped["delivery"]["headers"] == {"stripe-signature": "t=1,v1=ab"}
    assert OperationObserved.model_validate(dumped).delivery == delivery
