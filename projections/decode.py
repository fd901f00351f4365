"""What a record of recon.events or recon.drift holds, or why it holds nothing the
projections can use (a poison record, skipped and logged). Pure: the live projector
(services.projector.runtime) and `audit rebuild` decide this the same way, so they skip
the same records."""

from pydantic import ValidationError

from events.drift import DriftDetected
from events.envelope import Envelope
from events.transaction_events import Event


def decode_event(value: bytes | None) -> tuple[Envelope, Event] | str:
    """The envelope of a recon.events record with its event, or why it is not one. The
    event is returned, not only checked: the projector folds it, and decoding it a second
    time was a pydantic validation per event for nothing."""
    try:
        envelope = Envelope.model_validate_json(value or b"")
        return envelope, envelope.event()
    except ValidationError as exc:
        return f"not an event envelope: {exc.errors()[0]['msg']}"


def decode_envelope(value: bytes | None) -> Envelope | str:
    """The envelope of a recon.events record, or why it is not one."""
    decoded = decode_event(value)
    return decoded if isinstance(decoded, str) else decoded[0]


def decode_drift(value: bytes | None) -> DriftDetected | str:
    """The report of a recon.drift record, or why it is not one."""
    try:
        return DriftDetected.model_validate_json(value or b"")
    except ValidationError as exc:
        return f"not a DriftDetected report: {exc.errors()[0]['msg']}"
