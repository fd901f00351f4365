"""projections.decode: what the projectors may store, and what the chain's reading takes."""

from support.txbuilders import log_with_note

from events.drift import DriftDetected, DriftKind
from events.envelope import Envelope
from events.keys import drift_id
from projections.decode import UNSTORABLE_EVENT, decode_drift, decode_envelope, decode_event


def started_with_note(note: str) -> bytes:
    """The first event of a transaction whose charge's payload carries `note`."""
    return log_with_note("tx-note", note)[0].model_dump_json().encode()


def test_an_event_holding_a_nul_is_not_projected_but_stays_a_link_of_its_chain() -> None:
    value = started_with_note("before\x00after")
    assert b"\\u0000" in value
    assert decode_event(value) == UNSTORABLE_EVENT
    envelope = decode_envelope(value)
    assert isinstance(envelope, Envelope) and envelope.hash_matches()


def test_the_six_characters_of_an_escaped_nul_are_text_postgres_stores() -> None:
    decoded = decode_event(started_with_note("\\u0000"))
    assert not isinstance(decoded, str), decoded
    assert decoded[0].tx_id == "tx-note"


def test_a_drift_report_holding_a_nul_is_not_projected() -> None:
    report = DriftDetected(
        drift_id=drift_id(DriftKind.MISMATCH, "sandbox", "eff_1"),
        kind=DriftKind.MISMATCH,
        provider="sandbox",
        detail={"note": "before\x00after"},
        detected_at="2026-12-07T00:00:00+00:00",
    )
    value = report.model_dump_json().encode()
    assert decode_drift(value) == UNSTORABLE_EVENT
    assert decode_drift(value.replace(b"\\u0000", b"x")) == report.model_copy(
        update={"detail": {"note": "beforexafter"}}
    )
