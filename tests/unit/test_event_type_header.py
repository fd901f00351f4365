"""events.event_type_header: the type header written by the decider, read by the readers
that pass over events, and its absence on records written before it existed."""

from events.event_type_header import EVENT_TYPE, event_type_header, event_type_of, passed_over


def test_the_type_header_round_trips_and_is_absent_on_older_records() -> None:
    headers = [("traceparent", b"00-abc"), event_type_header("OperationDispatched")]

    assert event_type_of(headers) == "OperationDispatched"
    assert headers[1][0] == EVENT_TYPE
    assert event_type_of([("traceparent", b"00-abc")]) is None
    assert event_type_of(None) is None


def test_only_a_header_naming_another_type_is_passed_over() -> None:
    assert passed_over([event_type_header("OperationConfirmed")], ("OperationDispatched",))
    assert not passed_over([event_type_header("OperationDispatched")], ("OperationDispatched",))
    assert not passed_over([("traceparent", b"00-abc")], ("OperationDispatched",))
    assert not passed_over(None, ())
