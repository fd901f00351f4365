"""A provider file's `[listing]` keys for the drift scan's window and cut (since_param,
since_format, order, `more` paging): each mistake is refused at start-up naming the file's
line, a file without them keeps its meaning, and the since value is written as the file
says. Pure: no I/O but reading files."""

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import pytest

from reconcilers.drift import UnreadableEffect, effect_from_json
from services.providers.declared.adapter import DeclaredAdapter
from services.providers.declared.effects import listed, since_params
from services.providers.declared.locate import DeclarationError, parse
from services.providers.declared.model import Listing
from services.providers.http import Answer, Requester
from services.providers.listing import can_list_until

ACME = Path(__file__).resolve().parents[2] / "docs" / "examples" / "acme.toml"
TEXT = ACME.read_text(encoding="utf-8")
SANDBOX = Path(__file__).resolve().parents[1] / "support" / "sandbox_provider.toml"
PAGING = 'next = "/paging/next"\ncursor_param = "cursor"\n'
SINCE = datetime(2026, 12, 5, 10, 0, 0, 750_000, tzinfo=UTC)


def _listing(extra: str, paging: str = PAGING) -> str:
    assert PAGING in TEXT
    return TEXT.replace(PAGING, paging + extra)


def _refused(text: str) -> str:
    with pytest.raises(DeclarationError) as refused:
        parse(text, "acme.toml")
    return str(refused.value)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ('since_param = "created_gte"\nsince_format = "epoch"\n', "since_format"),
        ('order = "newest"\n', "order"),
        # A name a query gives meaning to would send another parameter than the file says.
        ('since_param = "since&admin=1"\n', "not a query parameter's name"),
        ('since_param = "created at"\n', "not a query parameter's name"),
        ('since_param = ""\n', "not a query parameter's name"),
        ('since_format = "unix"\n', "name since_param too"),
        ('since_param = "page_size"\n', "already a parameter"),
        ('since_param = "cursor"\n', "already a parameter"),
        ('more = "/paging/more"\n', "not both"),
        ('until_param = "created_lt"\n', "name since_param too"),
        ('since_param = "created_gte"\nuntil_param = "created_gte"\n', "already a parameter"),
        ('since_param = "created_gte"\nuntil_param = "cursor"\n', "already a parameter"),
    ],
)
def test_a_listing_mistake_is_refused_naming_its_line(extra: str, says: str) -> None:
    text = _listing(extra)
    message = _refused(text)
    assert says in message, message
    assert message.startswith("acme.toml:"), message


def test_paging_by_a_flag_needs_the_cursor_parameter() -> None:
    message = _refused(_listing("", paging='more = "/paging/more"\n'))
    assert "paging needs both cursor_param" in message


def test_a_file_without_the_keys_keeps_its_meaning() -> None:
    listing = parse(TEXT, "acme.toml").listing
    assert listing is not None
    assert (listing.since_param, listing.order, listing.more) == (None, "unknown", None)
    assert since_params(listing, SINCE) == {}


def test_the_since_value_is_written_as_the_file_says() -> None:
    listing = parse(SANDBOX.read_text(encoding="utf-8"), SANDBOX.name).listing
    assert listing is not None and listing.order == "newest_first"
    assert since_params(listing, SINCE) == {"created_gte": "2026-12-05T10:00:00.750000+00:00"}
    assert since_params(listing, None) == {}
    # Stripe's bracketed names are query parameter names too.
    unix = Listing.model_validate(
        {**listing.model_dump(), "since_param": "created[gte]", "since_format": "unix"}
    )
    # Rounded down: the effect created at `since` itself is still asked for.
    assert since_params(unix, SINCE) == {"created[gte]": str(int(SINCE.timestamp()))}


def test_the_until_value_is_written_as_the_file_says() -> None:
    """An account's hole is asked below an instant (reconcilers.drift_span.Hole)."""
    listing = parse(SANDBOX.read_text(encoding="utf-8"), SANDBOX.name).listing
    assert listing is not None
    until = SINCE + timedelta(minutes=1)
    iso = Listing.model_validate({**listing.model_dump(), "until_param": "created_lt"})
    assert since_params(iso, SINCE, until) == {
        "created_gte": SINCE.isoformat(),
        "created_lt": until.isoformat(),
    }
    unix = Listing.model_validate(
        {
            **listing.model_dump(),
            "since_param": "created[gte]",
            "until_param": "created[lt]",
            "since_format": "unix",
        }
    )
    # Rounded up: every effect created before `until` is still asked for.
    assert since_params(unix, None, until) == {"created[lt]": str(int(until.timestamp()) + 1)}
    assert since_params(listing, SINCE, until) == {"created_gte": SINCE.isoformat()}


def _page_of(*bodies: dict[str, object]) -> tuple[list[dict[str, str]], object]:
    """A provider answering `bodies` in turn, and the parameters each page was asked with."""
    asked: list[dict[str, str]] = []

    async def page(params: dict[str, str]) -> Answer:
        asked.append(params)
        return Answer(200, json.dumps(bodies[len(asked) - 1]).encode())

    return asked, page


GOOD = {
    "id": "ef_1",
    "operation": "charge",
    "idempotency_key": "k",
    "created_at": "2026-12-05T10:00:00+00:00",
}


@pytest.mark.parametrize(
    "item",
    [
        {k: v for k, v in GOOD.items() if k != "id"},
        {**GOOD, "id": None},
        {**GOOD, "id": ""},
        {**GOOD, "id": {"nested": 1}},
        {k: v for k, v in GOOD.items() if k != "created_at"},
        {**GOOD, "created_at": ["2026-12-05"]},
        {**GOOD, "created_at": 1e300},  # past year 9999
        {**GOOD, "created_at": None},
        {k: v for k, v in GOOD.items() if k != "operation"},
        "ef_1",
        7,
    ],
)
def test_an_item_the_file_cannot_read_is_listed_unreadable_not_guessed(item: object) -> None:
    """A field the item lacks is left out, so the scan skips the account as unreadable
    (docs/webhooks-reviews-drift.md): before, a missing id became "<object ...>" and a missing
    or odd creation time 1970, which put an effect without intent outside every window."""
    listing = parse(SANDBOX.read_text(encoding="utf-8"), SANDBOX.name).listing
    assert listing is not None
    _, page = _page_of({"effects": [GOOD, item], "has_more": False})
    found = asyncio.run(listed(page, listing)).effects  # type: ignore[arg-type]
    effect_from_json(found[0])
    with pytest.raises(UnreadableEffect):
        effect_from_json(found[1])


def test_paging_stops_at_an_item_without_an_id_rather_than_send_a_made_up_cursor() -> None:
    listing = parse(SANDBOX.read_text(encoding="utf-8"), SANDBOX.name).listing
    assert listing is not None
    no_id = {k: v for k, v in GOOD.items() if k != "id"}
    asked, page = _page_of(
        {"effects": [GOOD, no_id], "has_more": True}, {"effects": [], "has_more": False}
    )
    found = asyncio.run(listed(page, listing)).effects  # type: ignore[arg-type]
    assert len(asked) == 1 and len(found) == 2


def test_every_page_of_a_hole_is_asked_below_its_instant() -> None:
    """A hole's listing (reconcilers.drift_span.Hole) pages like any other, each page
    asked below the same instant; a file with `until_param` declares `lists_until`."""
    listing = Listing.model_validate(
        {
            **parse(SANDBOX.read_text(encoding="utf-8"), SANDBOX.name).listing.model_dump(),  # type: ignore[union-attr]
            "until_param": "created_lt",
        }
    )
    until = SINCE + timedelta(minutes=1)
    second = {**GOOD, "id": "ef_2"}
    asked, page = _page_of(
        {"effects": [GOOD], "has_more": True}, {"effects": [second], "has_more": False}
    )
    found = asyncio.run(listed(page, listing, SINCE, until)).effects  # type: ignore[arg-type]
    assert len(found) == 2
    assert [p["created_lt"] for p in asked] == [until.isoformat()] * 2
    assert asked[1]["starting_after"] == "ef_1"


def test_a_file_declares_lists_until_with_until_param_alone() -> None:
    text = SANDBOX.read_text(encoding="utf-8")
    assert 'since_param = "created_gte"\n' in text
    with_until = text.replace(
        'since_param = "created_gte"\n', 'since_param = "created_gte"\nuntil_param = "created_lt"\n'
    )
    for declared, lists_until in ((text, False), (with_until, True)):
        adapter = DeclaredAdapter(parse(declared, SANDBOX.name), cast(Requester, None))
        assert (adapter.lists_since, can_list_until(adapter)) == (True, lists_until)
