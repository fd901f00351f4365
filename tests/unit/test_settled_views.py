"""support.settled, the rule Recon.wait_terminal waits on, over views as
GET /v1/transactions/{tx_id} shows them (tests/integration/test_wait_terminal.py shows the
view it must refuse arising from the projector's batches)."""

from typing import Any

import pytest
from support.settled import settled


def view(status: str, *ops: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "tx_id": "t",
        "status": status,
        "operations": [{"action": a, "kind": k, "state": s} for a, k, s in ops],
    }


STEPS_DONE = (("reserve", "step", "confirmed"), ("charge", "step", "confirmed"))


def compensated(apology: str) -> dict[str, Any]:
    """Undone, its receipt never sent (for good), its apology in `apology`."""
    return view(
        "compensated",
        ("reserve", "step", "compensated"),
        ("charge", "step", "failed"),
        ("receipt", "on_commit", "pending"),
        ("apology", "on_compensated", apology),
    )


@pytest.mark.parametrize(
    ("tx", "over"),
    [
        # The commit projected, its receipt's dispatch not yet: not over.
        (view("committed", *STEPS_DONE, ("receipt", "on_commit", "pending")), False),
        (view("committed", *STEPS_DONE, ("receipt", "on_commit", "dispatched")), False),
        (view("committed", *STEPS_DONE, ("receipt", "on_commit", "confirmed")), True),
        # A notification in review holds nothing: a person decides it.
        (view("committed", *STEPS_DONE, ("receipt", "on_commit", "manual_review")), True),
        # The other kind of notification is never sent: it stays pending.
        (
            view(
                "committed",
                *STEPS_DONE,
                ("receipt", "on_commit", "confirmed"),
                ("apology", "on_compensated", "pending"),
            ),
            True,
        ),
        (compensated(apology="pending"), False),
        (compensated(apology="confirmed"), True),
        # A failed step's successors are never sent.
        (view("failed", ("wipe", "step", "failed"), ("charge", "step", "pending")), True),
        # An undo on the wire, whatever the status says.
        (view("manual_review", ("reserve", "step", "compensating")), False),
        (view("manual_review", ("charge", "step", "unknown")), False),
        (view("running", *STEPS_DONE), False),
    ],
)
def test_a_transaction_is_over_once_nothing_is_in_flight_or_still_to_be_sent(
    tx: dict[str, Any], over: bool
) -> None:
    assert settled(tx) is over


def test_a_status_asked_for_by_name_is_held_to_the_same_rule() -> None:
    undoing = view("compensating", ("charge", "step", "failed"), ("reserve", "step", "confirmed"))
    assert settled(undoing, ("compensating", "compensated"))
    assert not settled(undoing)
    sent = view("compensating", ("charge", "step", "failed"), ("reserve", "step", "compensating"))
    assert not settled(sent, ("compensating", "compensated"))
