"""Every begun call takes a lease (services.dispatcher.calls_begun.Call): a begin without a
holder would write a row nobody holds, which another process's claim takes at once while
the call may be on the wire, so one is refused before any statement, with what was wrong."""

import pytest

from services.dispatcher.call_lease import BEGIN_REQUESTS, lease_s
from services.dispatcher.calls_begun import MAX_HOLDER_CHARS, MAX_LEASE_S, Call


def a_call(holder: str, lease: float) -> Call:
    return Call(
        "demo",
        "tx-1",
        "k",
        "forward",
        1,
        "agent",
        "sandbox",
        "payments.charge",
        holder,
        lease,
        None,
    )


def test_a_call_begun_by_a_process_for_its_lease_is_accepted() -> None:
    call = a_call("f" * 32, lease_s(5.0, BEGIN_REQUESTS))
    assert call.holder == "f" * 32 and call.lease_s == 12.0


@pytest.mark.parametrize(
    ("holder", "lease", "said"),
    [
        ("", 12.0, "holder is 1-64 characters"),
        ("h" * (MAX_HOLDER_CHARS + 1), 12.0, "holder is 1-64 characters"),
        ("holder", 0.0, "lease is more than 0"),
        ("holder", -1.0, "lease is more than 0"),
        ("holder", MAX_LEASE_S + 1, "at most 86400 s"),
        ("holder", float("nan"), "lease is more than 0"),
    ],
)
def test_a_call_without_a_lease_someone_holds_is_refused(
    holder: str, lease: float, said: str
) -> None:
    with pytest.raises(ValueError, match=said):
        a_call(holder, lease)
