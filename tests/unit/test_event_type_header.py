"""events.event_type_header: the type header written by the decider, read by the readers
that pass over events, and its absence on records written before it existed."""

from events.event_type_header import EVENT_TYPE, event_type_header, event_type_of


def test_the_type_header_round_trips_and_is_absent_on_older_records() -> None:
    headers = [("traceparent", b"00-abc"), event_type_header("OperationDispatched")]

    assert event_type_of(headers) == "OperationDispatched"
    assert headers[1][0] == EVENT_TYPE
    assert event_type_of([("traceparent", b"00-abc")]) is None
    assert event_type_of(None) is None
