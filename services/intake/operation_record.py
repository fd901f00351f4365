"""An operation's durable record (`GET /v1/operations/{op_key}`), folded from its
transaction's events.

Pure: no I/O, no clock. The log is the record: what was approved (the payload and provider
as TransactionAccepted fixed them; nothing later can change them), every dispatch under the
operation's keys with its attempt (the fencing token), every observation with its
evidence, and who owned the transaction when (the submitter, then each claim). Reading it
grants nothing: it is evidence for a successor, not authority.
"""

from typing import Any

from events.definition import Leg

# Event types about the transaction's ownership (transactions.ownership); listed by
# name so that this fold reads an old log, and a log from before they existed, alike.
CLAIMED = "TransactionClaimed"
RELEASED = "OwnershipReleased"
FENCED = "CommandFenced"
REFUSED = "CommandRefused"
# The approval trail of a step (transactions.approvals), also listed among observations.
APPROVAL_EVENTS = (
    "OperationAwaitingApproval",
    "OperationApproved",
    "ApprovalRefused",
    "ApprovalExpired",
    "OperationRejected",
)


def operation_record(
    op_key: str, action: str, events: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """`events`: the transaction's events in seq order, each with `seq`, `type`,
    `occurred_at` and `data`. None when no event names the operation."""
    spec: dict[str, Any] | None = None
    submitter: dict[str, Any] = {}
    owner: dict[str, Any] | None = None
    successions: list[dict[str, Any]] = []
    refusals: list[dict[str, Any]] = []
    dispatches: list[dict[str, Any]] = []
    observations: list[dict[str, Any]] = []
    approvals: list[dict[str, Any]] = []
    for event in events:
        kind, data, seq, at = event["type"], event["data"], event["seq"], event["occurred_at"]
        if kind == "TransactionAccepted":
            spec = next((s for s in data["operations"] if s["action"] == action), None)
            submitter = {
                "agent_id": data.get("agent_id"),
                "session_id": data.get("session_id"),
                "fingerprint": data.get("fingerprint"),
            }
            owner = {
                "agent_id": data.get("agent_id"),
                "session_id": data.get("session_id"),
                "since_seq": seq,
                "lease_expires_at": data.get("lease_expires_at"),
            }
        elif kind == CLAIMED:
            successor = {
                "agent_id": data["agent_id"],
                "session_id": data["session_id"],
                "since_seq": seq,
                "lease_expires_at": data.get("lease_expires_at"),
            }
            successions.append({"seq": seq, "at": at, "from": owner, "to": successor})
            owner = successor
        elif kind == RELEASED and owner is not None:
            owner = {**owner, "released_at_seq": seq}
        elif kind in (FENCED, REFUSED):
            refusals.append({"seq": seq, "at": at, "type": kind, **data})
        elif data.get("action") != action:
            continue
        elif kind == "OperationDispatched":
            dispatches.append(
                {
                    "seq": seq,
                    "at": at,
                    "leg": data.get("leg", Leg.FORWARD.value),
                    "op_key": data["op_key"],
                    "attempt": data["attempt"],
                    "lookup_first": data["lookup_first"],
                    "provider": data["provider"],
                    "operation": data["operation"],
                    "payload": data["payload"],
                    # Why the call's payload carries an expected_revision the approved
                    # one does not: the revision its approval was given at.
                    **(
                        {"pinned_revision": data["pinned_revision"]}
                        if data.get("pinned_revision") is not None
                        else {}
                    ),
                }
            )
        elif kind != "TransactionFailed" and kind != "TransactionNeedsReview":
            # What was seen or decided about the operation: confirmations, failures,
            # unknowns, ignored (fenced) observations, reviews and their resolutions, each
            # with its evidence as the decider recorded it.
            observations.append({"seq": seq, "at": at, "type": kind, **data})
            if kind in APPROVAL_EVENTS:
                approvals.append({"seq": seq, "at": at, "type": kind, **data})
    if spec is None:
        return None
    return {
        "op_key": op_key,
        "leg": (Leg.COMPENSATION if op_key == spec.get("compensation_key") else Leg.FORWARD).value,
        "action": action,
        "approved": {
            "kind": spec["kind"],
            "provider": spec["provider"],
            "operation": spec["operation"],
            "payload": spec["payload"],
            "op_key": spec["op_key"],
            "compensation": spec.get("compensation"),
            "compensation_key": spec.get("compensation_key"),
            "submitted_by": submitter,
        },
        "attempts": max((d["attempt"] for d in dispatches if d["op_key"] == op_key), default=0),
        "dispatches": dispatches,
        "observations": observations,
        "approvals": approvals,
        "owner": owner,
        "successions": successions,
        "refusals": refusals,
    }
