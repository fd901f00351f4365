"""The `declared` adapter as contract kit targets (tests/support/provider_kit.py), speaking
docs/examples/acme.toml to the Acme fake (tests/support/acme_fake.py), an API shaped
unlike the sandbox's: one per lookup strategy the file can declare.

- `acme`: the file as shipped, lookup strategy `query`;
- `acme-replay`: the same file with `replay` inside a 24 h key retention (the fake prunes
  its keys after it) and `query` past it;
- `acme-none`: nothing can be asked (the kit checks that a lookup sends nothing);
- `acme-listing`: the file's drift listing asks for its window (`since_param`, unix
  seconds), newest first (`order`), each next page after the last record (`more`), two
  records a page and three pages at most, so the kit sees the window, the paging and the
  cut on a few effects.
"""

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from reconcilers.signatures import sign_standard
from services.providers.declared.adapter import DeclaredAdapter
from services.providers.declared.locate import parse
from services.providers.declared.model import ProviderFile
from services.providers.http import ProviderHttp, Requester
from services.providers.interface import ProviderAdapter
from support.acme_fake import API_KEY, Acme, running_acme
from support.provider_kit import Answers, ListingFacts, Live, RefusalFacts, Webhooks

ACME_FILE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "acme.toml"
RETENTION_S = 24 * 3600.0
QUERY_LOOKUP = '[lookup]\nstrategy = "query"\n'
NONE_LOOKUP = '[lookup]\nstrategy = "none"\n'


def none_text(text: str) -> str:
    """acme.toml's `text` declaring lookup strategy `none`: nothing can be asked, so the
    file's query table goes with the strategy."""
    head, _, rest = text.partition(QUERY_LOOKUP)
    return head + NONE_LOOKUP + rest[rest.index("\n[listing]") :]


def acme_file(lookup: str = QUERY_LOOKUP) -> ProviderFile:
    """docs/examples/acme.toml, its `[lookup]` head replaced by `lookup`."""
    text = ACME_FILE.read_text(encoding="utf-8")
    assert QUERY_LOOKUP in text, "docs/examples/acme.toml's lookup moved"
    return parse(text.replace(QUERY_LOOKUP, lookup), ACME_FILE.name)


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return json.dumps({"id": "evt_kit", "type": kind, "data": data}).encode()


# Acme's own events (docs/examples/acme.toml, [webhooks.events]).
ACME_WEBHOOKS = Webhooks(
    effect=lambda key: _event(
        "record.done",
        {
            "record": {
                "ref": "pay_kit",
                "kind": "payment",
                "phase": "done",
                "request_id": key,
                "meta": {"recon_ref": key},
            }
        },
    ),
    unread=_event("record.archived", {"record": {"ref": "pay_kit"}}),
    malformed=_event("record.done", {}),
)


def _problem(code: str) -> bytes:
    return json.dumps({"problem": {"code": code, "detail": code}}).encode()


class AcmeTarget:
    name = "acme"
    secret = "whsec_" + "YWNtZS1raXQtc2VjcmV0LWtleQ=="
    other_secret = "whsec_" + "YW5vdGhlci1hY21lLXNlY3JldA=="
    answers = Answers(
        operation="payments.charge",
        confirmed=(201, b'{"result": {"record": {"ref": "pay_000001", "phase": "done"}}}'),
        refusal=(422, _problem("card_declined")),
        key_conflict=(409, _problem("request_id_reused")),
        in_flight=(409, _problem("request_in_progress")),
        error=_problem("internal"),
    )
    # A provider file declares no event format: Acme sends recon's.
    webhooks = ACME_WEBHOOKS
    lookup = QUERY_LOOKUP
    retention_s: float | None = None
    keeps_refusals = True

    def __init__(self) -> None:
        self.declared = acme_file(self.lookup)

    def sign(self, secret: str, timestamp: int, body: bytes) -> dict[str, str]:
        return sign_standard(secret, f"msg_{uuid.uuid4().hex}", timestamp, body)

    def adapter_over(self, http: Requester) -> ProviderAdapter:
        return DeclaredAdapter(self.declared, http, "http://acme.invalid", API_KEY, name="acme")

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Live]:
        state = Acme(retention_s=self.retention_s, keeps_refusals=self.keeps_refusals)
        async with running_acme(state) as (acme, url), ProviderHttp(10.0) as http:

            async def payload() -> dict[str, Any]:
                return {"amount": 1250, "currency": "eur", "customer": "cus_kit"}

            async def effects_under(key: str) -> int:
                return len(acme.under(key))

            async def slow_down(seconds: float) -> None:
                acme.hold_s = seconds

            async def out_of_stock() -> dict[str, Any]:
                # More than Acme holds of a sku it never saw (100): refused out_of_stock
                # until it is restocked.
                return {"sku": f"sku-kit-{uuid.uuid4().hex[:16]}", "qty": 101}

            async def restock(payload: dict[str, Any]) -> None:
                acme.stock[payload["sku"]] = 1000

            yield Live(
                adapter=DeclaredAdapter(
                    self.declared, http, url, API_KEY, clock=acme.clock, name="acme"
                ),
                operation=self.answers.operation,
                now=acme.clock,
                payload=payload,
                other=lambda p: {**p, "amount": p["amount"] + 1},
                effects_under=effects_under,
                slow_down=slow_down,
                expire_keys=(
                    None
                    if self.retention_s is None
                    else lambda: acme.clock.advance(RETENTION_S + 3600)
                ),
                listing=self.listing_facts(acme),
                refusals=(RefusalFacts("inventory.reserve", out_of_stock, restock),),
            )

    def listing_facts(self, acme: Acme) -> ListingFacts | None:
        return None


class AcmeReplayTarget(AcmeTarget):
    name = "acme-replay"
    lookup = '[lookup]\nstrategy = "replay"\nkey_retention = "24h"\n'
    retention_s = RETENTION_S


class AcmeAfreshTarget(AcmeTarget):
    """Not Acme's way, and not one of DECLARED: Acme keeping no refusal under its key, so
    a refused key sent again is judged afresh. The contract kit must fail it
    (test_the_kit_fails_a_provider_that_judges_a_refused_key_afresh; or run the kit over it
    with PROVIDER_KIT_TARGETS=support.acme_targets:AFRESH)."""

    name = "acme-afresh"
    keeps_refusals = False


class AcmeNoneTarget(AcmeTarget):
    name = "acme-none"
    lookup = NONE_LOOKUP

    def __init__(self) -> None:
        self.declared = parse(none_text(ACME_FILE.read_text(encoding="utf-8")), ACME_FILE.name)


# The shipped file's listing head, and what acme-listing declares instead.
OFFSET_PAGES = 'params = { page_size = "50" }\n'
OFFSET_CURSOR = 'next = "/paging/next"\ncursor_param = "cursor"\n'
LISTING_PAGES = 'params = { page_size = "2", sort = "-created" }\nmax_pages = 3\n'
LISTING_CURSOR = (
    'more = "/paging/more"\ncursor_param = "after"\n'
    'since_param = "created_since"\nsince_format = "unix"\norder = "newest_first"\n'
)


class AcmeListingTarget(AcmeTarget):
    name = "acme-listing"

    def __init__(self) -> None:
        text = ACME_FILE.read_text(encoding="utf-8")
        assert OFFSET_PAGES in text and OFFSET_CURSOR in text, "acme.toml's listing moved"
        text = text.replace(OFFSET_PAGES, LISTING_PAGES).replace(OFFSET_CURSOR, LISTING_CURSOR)
        self.declared = parse(text, ACME_FILE.name)

    def listing_facts(self, acme: Acme) -> ListingFacts | None:
        async def wait(seconds: float) -> None:
            acme.clock.advance(seconds)

        return ListingFacts(wait=wait, page_size=2, most_listed=6, newest_first=True)


DECLARED: list[AcmeTarget] = [
    AcmeTarget(),
    AcmeReplayTarget(),
    AcmeNoneTarget(),
    AcmeListingTarget(),
]

AFRESH = AcmeAfreshTarget()
