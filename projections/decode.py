"""What a record of recon.events or recon.drift holds, or why it holds nothing the
projections can use (a poison record, skipped and logged). Pure: the live projector
(services.projector.runtime) and `audit rebuild` decide this the same way, so they skip
the same records.

A record holding a NUL in its text is one of them (`UNSTORABLE_EVENT`): Postgres refuses it
in `text` and `jsonb` at every retry, so projected it failed its whole batch for good and
the partition's projection stopped for every tenant (stop 60 found it, an abort's reason).
Nothing recon writes holds one now (the intake refuses it, the decider sets such an input
aside, evidence escapes it: events.safe_json), but the log keeps what an older version or a
writer past the decider put there. It is still a link of its transaction's chain: the
auditor's reading (`decode_envelope`) takes it."""

from pydantic import ValidationError

from events.drift import DriftDetected
from events.envelope import Envelope
from events.safe_json import holds_nul
from events.transaction_events import Event

UNSTORABLE_EVENT = "unstorable: a NUL in its text, which Postgres cannot store"


def decode_event(value: bytes | None) -> tuple[Envelope, Event] | str:
    """The envelope of a recon.events record with its event, or why it cannot be
    projected. The event is returned, not only checked: the projector folds it, and
    decoding it a second time was a pydantic validation per event for nothing."""
    if value is not None and holds_nul(value):
        return UNSTORABLE_EVENT
    return _envelope_and_event(value)


def decode_envelope(value: bytes | None) -> Envelope | str:
    """The envelope of a recon.events record, or why it is not one: the chain's reading
    (audit verify), which a NUL does not break."""
    decoded = _envelope_and_event(value)
    return decoded if isinstance(decoded, str) else decoded[0]


def decode_drift(value: bytes | None) -> DriftDetected | str:
    """The report of a recon.drift record, or why it cannot be projected."""
    if value is not None and holds_nul(value):
        return UNSTORABLE_EVENT
    try:
        return DriftDetected.model_validate_json(value or b"")
    except ValidationError as exc:
        return f"not a DriftDetected report: {exc.errors()[0]['msg']}"


def _envelope_and_event(value: bytes | None) -> tuple[Envelope, Event] | str:
    try:
        envelope = Envelope.model_validate_json(value or b"")
        return envelope, envelope.event()
    except ValidationError as exc:
        return f"not an event envelope: {exc.errors()[0]['msg']}"
