"""The decider binds an approval to the preview its approver was shown (transactions.
approvals): it recomputes the digest from the steps the approval carries (events.preview,
the function the intake hashes previews with), requires the preview to be of this
transaction's proposal and to show the step gated, and pins the call to the revision that
step showed. Whatever does not hold is refused on the chain, with its reason, and nothing
is dispatched, whichever door the command came through."""

import json

from support.approval_builders import FINGERPRINT, approve, gated_submit, shown_step
from support.txbuilders import observed

from events.approval_events import ApprovalRefused, OperationApproved
from events.inputs import DeciderInput, Outcome, parse_input
from events.preview import MAX_SHOWN_BYTES, preview_digest
from events.transaction_events import Event, OperationDispatched, event_data, event_from
from transactions.state import TransactionState
from transactions.transaction import decide, evolve, handle, initial_state


def given(*inputs: DeciderInput) -> TransactionState:
    state = initial_state("demo", "tx-1")
    for message in inputs:
        state, _ = handle(state, message)
    return state


def waiting_unplanned() -> TransactionState:
    """The promotion waits; its agent named no expected_revision, so an approval pins one."""
    return given(gated_submit(planned=False), observed("reserve", 1, Outcome.SUCCEEDED))


def refusal_recorded(command: DeciderInput) -> str:
    """The reason the decider records for `command`, after checking nothing ran on it."""
    state, envelopes = handle(waiting_unplanned(), command)
    events = [e.event() for e in envelopes]
    assert [e.type for e in events] == ["ApprovalRefused"], events
    assert state.approvals == ()
    assert isinstance(events[0], ApprovalRefused)
    return events[0].reason


def dispatched(events: list[Event]) -> OperationDispatched:
    [dispatch] = [e for e in events if isinstance(e, OperationDispatched)]
    return dispatch


def test_an_approval_whose_steps_hash_to_its_digest_is_recorded_with_what_was_shown() -> None:
    command = approve(5, revision=7)

    events = decide(waiting_unplanned(), command)

    approved = events[0]
    assert isinstance(approved, OperationApproved)
    assert approved.shown == command.shown and approved.revision == 7
    # An auditor reading the chain recomputes the digest from what it says was shown.
    assert approved.shown is not None
    assert preview_digest("tx-1", approved.proposal_digest, approved.shown) == (
        approved.preview_digest
    )
    # The revision pinned on the call is the shown step's.
    assert dispatched(events).payload["expected_revision"] == 7


def test_a_forged_digest_is_refused() -> None:
    assert refusal_recorded(approve(5, revision=7, preview="0" * 64)) == "digest_mismatch"


def test_steps_changed_under_their_digest_are_refused_so_no_other_revision_is_pinned() -> None:
    # The digest of the preview that showed revision 7, carried with steps showing 8.
    honest = approve(5, revision=7)
    forged = approve(5, revision=8, preview=honest.preview_digest)
    assert refusal_recorded(forged) == "digest_mismatch"


def test_another_proposals_preview_is_refused() -> None:
    # A preview that hashes right, but of another proposal: computed for it, or carried
    # with its proposal digest in place of this transaction's fingerprint.
    steps = (shown_step(revision=7),)
    other = approve(5, shown=steps, preview=preview_digest("tx-1", "e" * 64, steps))
    assert refusal_recorded(other) == "digest_mismatch"
    assert refusal_recorded(approve(5, digest="e" * 64, revision=7)) == "digest_mismatch"
    # Of another transaction with the same proposal digest.
    elsewhere = approve(5, shown=steps, preview=preview_digest("tx-2", FINGERPRINT, steps))
    assert refusal_recorded(elsewhere) == "digest_mismatch"


def test_a_preview_that_does_not_show_the_step_gated_is_refused() -> None:
    others_only = (shown_step("reserve", revision=7),)
    assert refusal_recorded(approve(5, shown=others_only)) == "step_not_shown"
    ungated = (shown_step(revision=7, gated=False),)
    assert refusal_recorded(approve(5, shown=ungated)) == "step_not_shown"
    another_operation = (shown_step(revision=7).model_copy(update={"operation": "records.delete"}),)
    assert refusal_recorded(approve(5, shown=another_operation)) == "step_not_shown"


def test_a_preview_too_large_to_record_is_refused() -> None:
    step = shown_step(revision=7)
    huge = (step.model_copy(update={"effects": {"blob": "x" * MAX_SHOWN_BYTES}}),)
    assert refusal_recorded(approve(5, shown=huge)) == "preview_too_large"


def test_a_v1_command_still_reads_and_is_refused_for_it_shows_nothing() -> None:
    # As the intake produced it before approvals carried their preview: the digest, and the
    # revision on the intake's word. Readable (not a dead letter), and refused on the chain.
    v1 = approve(5).model_dump(mode="json", exclude={"shown"})
    v1 |= {"schema_version": 1, "revision": 7}

    command = parse_input(json.dumps(v1).encode())

    assert command.type == "ApproveOperation" and command.schema_version == 1
    assert refusal_recorded(command) == "preview_not_shown"


def test_an_approval_the_decider_refuses_changes_nothing_for_the_next_one() -> None:
    # The refused one left the step waiting; an honest approval then dispatches it.
    state = given(
        gated_submit(planned=False),
        observed("reserve", 1, Outcome.SUCCEEDED),
        approve(5, approval_id="forged", revision=7, preview="0" * 64),
    )
    events = decide(state, approve(6, approval_id="honest", revision=7))
    assert [e.type for e in events] == ["OperationApproved", "OperationDispatched"]


def test_an_approval_recorded_before_it_carried_its_preview_reads_and_hashes_as_it_was() -> None:
    # The data of an OperationApproved on the chain from before `shown`: the envelope's hash
    # covers exactly these fields, so the event must dump to them again.
    recorded = {
        "schema_version": 1,
        "action": "promote",
        "approval_id": "ap-old",
        "proposal_digest": FINGERPRINT,
        "preview_digest": "p" * 64,
        "approver": "ops@example.com",
        "expires_at": "2026-01-01T00:10:00+00:00",
        "revision": 7,
    }
    event = event_from("OperationApproved", recorded)
    assert isinstance(event, OperationApproved) and event.shown is None
    assert event_data(event) == recorded
    # And its approval still pins what it recorded.
    assert evolve(given(gated_submit(planned=False)), event).approvals[0].revision == 7
