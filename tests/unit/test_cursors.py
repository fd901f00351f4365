"""Page cursors (services.intake.cursors) hold a position for one list, tenant and set of
filters, and are refused anywhere else or once altered."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.intake.cursors import cursor_key, make_cursor, read_cursor
from services.intake.errors import ApiError

KEY = cursor_key("a-secret-of-this-deployment")
FILTERS = {"status": "running"}


@given(st.lists(st.one_of(st.integers(), st.text()), min_size=1, max_size=3))
def test_a_cursor_gives_back_its_position(position: list[object]) -> None:
    cursor = make_cursor(KEY, "transactions", "demo", FILTERS, position)
    assert read_cursor(KEY, cursor, "transactions", "demo", FILTERS) == position


@pytest.mark.parametrize(
    ("key", "kind", "tenant", "filters"),
    [
        (cursor_key("another-deployment-secret"), "transactions", "demo", FILTERS),
        (KEY, "reviews", "demo", FILTERS),
        (KEY, "transactions", "other", FILTERS),
        (KEY, "transactions", "demo", {}),
        (KEY, "transactions", "demo", {"status": "failed"}),
    ],
)
def test_a_cursor_is_refused_off_its_deployment_list_tenant_and_filters(
    key: bytes, kind: str, tenant: str, filters: dict[str, str]
) -> None:
    cursor = make_cursor(KEY, "transactions", "demo", FILTERS, ["2026-01-01T00:00:00+00:00", "t"])
    with pytest.raises(ApiError) as refused:
        read_cursor(key, cursor, kind, tenant, filters)
    assert (refused.value.status, refused.value.code) == (422, "invalid_cursor")


@pytest.mark.parametrize("cursor", ["", ".", "x.y", "not base64!.zz", "e30.e30"])
def test_anything_but_a_cursor_is_refused(cursor: str) -> None:
    with pytest.raises(ApiError):
        read_cursor(KEY, cursor, "transactions", "demo", FILTERS)


def test_an_altered_position_is_refused() -> None:
    cursor = make_cursor(KEY, "events", "demo", {}, [5])
    body, _, mac = cursor.partition(".")
    forged = make_cursor(cursor_key("guess"), "events", "demo", {}, [1])
    with pytest.raises(ApiError):
        read_cursor(KEY, f"{forged.partition('.')[0]}.{mac}", "events", "demo", {})
    assert read_cursor(KEY, f"{body}.{mac}", "events", "demo", {}) == [5]
