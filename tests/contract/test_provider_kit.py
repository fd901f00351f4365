"""The provider contract kit: what every adapter must do, whoever wrote it (issue 20,
item 6; docs/providers.md, "The contract kit").

Parametrised over targets (tests/support/provider_kit.py): the built-in adapters
(tests/support/kit_targets.py) and any a third party names in PROVIDER_KIT_TARGETS.

- Classification: the kit plays the provider answer by answer (a scripted HTTP client),
  so every status family is checked in microseconds: only a definitive refusal is
  `rejected`, a reused key is `key_conflict`, and nothing that leaves the effect possible
  (a request in flight, our credentials or route, timing, a 5xx, a lost or malformed
  answer) is anything but `unknown`.
- Semantics, against the running provider: one effect per key under repeated and
  concurrent applies; the same key with another payload makes nothing; lookups find what
  was made, prove what was not, and a `replay` adapter never resends past its retention;
  the drift listing shows every effect under its key. Where a target gives ListingFacts:
  a listing asked since an instant lists that window alone, one longer than a page reads
  every page, and a cut listing covers only what is newer than its oldest effect (newest
  first; nothing when its order is unknown). Where a target gives RefusalFacts: a key
  refused, sent again once the cause of the refusal is lifted, is answered the same
  refusal and makes nothing (a provider judging it afresh would make it).
- Webhooks: a valid signature is accepted inside the replay window, a wrong one and one
  signed outside the window refused; the provider's event about an effect reads as the
  operation made under its key, an event the adapter does not act on settles nothing,
  and a body that is no event of the provider's is refused (WebhookBodyError).
"""

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from support.acme_targets import AFRESH, DECLARED
from support.kit_targets import BUILT_IN
from support.provider_kit import (
    KitTarget,
    ListingFacts,
    Live,
    RefusalFacts,
    Scripted,
    third_party_targets,
)

from events.inputs import Outcome
from events.observation import Seen
from reconcilers.drift import effect_from_json
from reconcilers.signatures import SignatureError, SignatureErrorCode, verify
from reconcilers.webhook_reading import WebhookBodyError
from services.providers.interface import NOTHING_COVERED, EffectListing, ProviderAdapter, Sent
from services.providers.listing import listing_of
from services.providers.lookup_strategy import CANNOT_BE_ASKED, Strategy, strategy_of

TARGETS: list[KitTarget] = [*BUILT_IN, *DECLARED, *third_party_targets()]
REPLAYING = [t for t in TARGETS if t.adapter_over(Scripted()).key_retention_s is not None]
# Providers that can be asked something (`query`, `replay`); a `none` provider's lookups
# are checked to send nothing instead.
ASKABLE = [t for t in TARGETS if strategy_of(t.adapter_over(Scripted())) is not Strategy.NONE]
SILENT = [t for t in TARGETS if t not in ASKABLE]
TOLERANCE_S = 300
# What the kit sends when it plays the provider: the answer is scripted, not the request.
ANY_PAYLOAD = {"amount": 1, "currency": "eur"}


def _ids(target: KitTarget) -> str:
    return target.name


def _cannot_be_asked(adapter: ProviderAdapter) -> bool:
    return strategy_of(adapter) is Strategy.NONE


def new_key() -> str:
    return f"kit-{uuid.uuid4()}"


@pytest.fixture(params=TARGETS, ids=_ids)
def target(request: pytest.FixtureRequest) -> KitTarget:
    chosen: KitTarget = request.param
    return chosen


@pytest.fixture(params=ASKABLE, ids=_ids)
def askable(request: pytest.FixtureRequest) -> KitTarget:
    chosen: KitTarget = request.param
    return chosen


@pytest.fixture(scope="module", params=TARGETS, ids=_ids)
async def live(request: pytest.FixtureRequest) -> AsyncIterator[Live]:
    chosen: KitTarget = request.param
    async with chosen.running() as running:
        yield running


async def _answer(target: KitTarget, status: int, body: bytes) -> Outcome:
    adapter = target.adapter_over(Scripted(status, body))
    seen = await adapter.apply(
        target.answers.operation, new_key(), {"amount": 1, "currency": "eur"}
    )
    return seen.outcome


# --- classification of every status family ------------------------------------------


async def test_a_confirmed_answer_is_succeeded_with_the_providers_id(target: KitTarget) -> None:
    adapter = target.adapter_over(Scripted(*target.answers.confirmed))
    seen = await adapter.apply(
        target.answers.operation, new_key(), {"amount": 1, "currency": "eur"}
    )
    assert seen.outcome is Outcome.SUCCEEDED
    assert seen.remote_id


async def test_a_definitive_refusal_is_rejected(target: KitTarget) -> None:
    assert await _answer(target, *target.answers.refusal) is Outcome.REJECTED


async def test_the_key_reused_with_another_payload_is_a_key_conflict(target: KitTarget) -> None:
    assert await _answer(target, *target.answers.key_conflict) is Outcome.KEY_CONFLICT


async def test_a_request_still_in_flight_under_the_key_is_unknown(target: KitTarget) -> None:
    # The first request may still make the effect: never a refusal, never a conflict.
    assert await _answer(target, *target.answers.in_flight) is Outcome.UNKNOWN


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_an_answer_about_our_credentials_or_route_is_unknown_with_an_alarm(
    target: KitTarget, status: int
) -> None:
    adapter = target.adapter_over(Scripted(status, target.answers.error))
    seen = await adapter.apply(
        target.answers.operation, new_key(), {"amount": 1, "currency": "eur"}
    )
    assert seen.outcome is Outcome.UNKNOWN
    assert seen.alarm, "a person must see that the configuration is wrong"


@pytest.mark.parametrize("status", [408, 429])
async def test_an_answer_about_timing_is_unknown_without_an_alarm(
    target: KitTarget, status: int
) -> None:
    adapter = target.adapter_over(Scripted(status, target.answers.error))
    seen = await adapter.apply(
        target.answers.operation, new_key(), {"amount": 1, "currency": "eur"}
    )
    assert (seen.outcome, seen.alarm) == (Outcome.UNKNOWN, None)


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_a_server_error_is_unknown(target: KitTarget, status: int) -> None:
    assert await _answer(target, status, target.answers.error) is Outcome.UNKNOWN


async def test_a_lost_response_is_unknown(target: KitTarget) -> None:
    adapter = target.adapter_over(Scripted(lost=True))
    seen = await adapter.apply(
        target.answers.operation, new_key(), {"amount": 1, "currency": "eur"}
    )
    assert seen.outcome is Outcome.UNKNOWN


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, b"<html>gateway</html>"),
        (200, b'{"id": "x", "stat'),
        (200, b"[]"),
        (202, b""),
    ],
    ids=["html", "truncated", "not-an-object", "accepted-empty"],
)
async def test_a_malformed_or_empty_success_is_unknown(
    target: KitTarget, status: int, body: bytes
) -> None:
    assert await _answer(target, status, body) is Outcome.UNKNOWN


def _lookups() -> list[Sent | None]:
    """The lookups a kit target is asked: without the first request, and with one sent
    just now (inside a `replay` adapter's retention: the resend)."""
    return [None, Sent(ANY_PAYLOAD, at=datetime.now(UTC))]


async def test_a_lookup_that_cannot_reach_the_provider_is_unavailable(askable: KitTarget) -> None:
    adapter = askable.adapter_over(Scripted(lost=True))
    for sent in _lookups():
        seen = await adapter.lookup(askable.answers.operation, new_key(), sent)
        assert seen.outcome is Outcome.UNAVAILABLE, sent


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_a_lookup_the_provider_cannot_answer_now_is_unavailable(
    askable: KitTarget, status: int
) -> None:
    adapter = askable.adapter_over(Scripted(status, askable.answers.error))
    for sent in _lookups():
        seen = await adapter.lookup(askable.answers.operation, new_key(), sent)
        assert (seen.outcome, seen.alarm) == (Outcome.UNAVAILABLE, None), sent


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_a_lookup_refused_for_our_configuration_is_unavailable_with_an_alarm(
    askable: KitTarget, status: int
) -> None:
    adapter = askable.adapter_over(Scripted(status, askable.answers.error))
    for sent in _lookups():
        seen = await adapter.lookup(askable.answers.operation, new_key(), sent)
        assert seen.outcome is Outcome.UNAVAILABLE and seen.alarm, sent


@pytest.mark.parametrize("silent", SILENT, ids=_ids)
async def test_a_provider_that_cannot_be_asked_is_sent_no_lookup(silent: KitTarget) -> None:
    # `none`: a lookup would be a resend or a guess; it says so and sends nothing, and the
    # outcome waits for a signed webhook or a person.
    http = Scripted(*silent.answers.confirmed)
    adapter = silent.adapter_over(http)
    for sent in _lookups():
        seen = await adapter.lookup(silent.answers.operation, new_key(), sent)
        assert seen.outcome is Outcome.UNAVAILABLE
        assert CANNOT_BE_ASKED in (seen.error or "")
    assert http.requests == 0


# --- webhooks: signatures and their replay window, and reading ---------------------


def test_a_validly_signed_webhook_is_accepted(target: KitTarget) -> None:
    now, event = 1_800_000_000, target.webhooks.effect(new_key())
    for signed_at in (now, now - TOLERANCE_S, now + TOLERANCE_S):  # the window's edges
        headers = target.sign(target.secret, signed_at, event)
        verified = verify(
            target.adapter_over(Scripted()).webhook_scheme,
            headers,
            event,
            [target.other_secret, target.secret],
            now,
            TOLERANCE_S,
        )
        assert verified.timestamp == signed_at and verified.delivery_id


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("other secret", SignatureErrorCode.BAD_SIGNATURE),
        ("altered body", SignatureErrorCode.BAD_SIGNATURE),
        ("stale", SignatureErrorCode.TIMESTAMP_OUT_OF_TOLERANCE),
        ("from the future", SignatureErrorCode.TIMESTAMP_OUT_OF_TOLERANCE),
    ],
)
def test_an_invalid_or_replayed_webhook_is_refused(
    target: KitTarget, case: str, code: SignatureErrorCode
) -> None:
    now, event = 1_800_000_000, target.webhooks.effect(new_key())
    signed_at = {"stale": now - TOLERANCE_S - 1, "from the future": now + TOLERANCE_S + 1}
    secret = target.other_secret if case == "other secret" else target.secret
    headers = target.sign(secret, signed_at.get(case, now), event)
    body = event + b" " if case == "altered body" else event
    with pytest.raises(SignatureError) as refused:
        verify(
            target.adapter_over(Scripted()).webhook_scheme,
            headers,
            body,
            [target.secret],
            now,
            TOLERANCE_S,
        )
    assert refused.value.code is code


def test_an_effect_event_reads_as_the_operation_made_under_its_key(target: KitTarget) -> None:
    key = new_key()
    reading = target.adapter_over(Scripted()).read_webhook(target.webhooks.effect(key))
    notice = reading.notice
    assert notice is not None, f"{reading.type} must be read as an effect"
    # The key of the request that made it comes first: it alone is recon's secret.
    assert notice.keys[:1] == (key,)
    assert notice.outcome is Outcome.SUCCEEDED
    assert notice.effect_id and isinstance(notice.effect, dict)


def test_an_event_the_adapter_does_not_act_on_settles_nothing(target: KitTarget) -> None:
    reading = target.adapter_over(Scripted()).read_webhook(target.webhooks.unread)
    assert reading.notice is None and reading.type


@pytest.mark.parametrize("case", ["not JSON", "not an object", "no type", "malformed"])
def test_a_body_that_is_no_event_of_the_provider_is_refused(target: KitTarget, case: str) -> None:
    body = {
        "not JSON": b"<html>proxy</html>",
        "not an object": b"[]",
        "no type": b'{"id": "evt_kit"}',
        "malformed": target.webhooks.malformed,
    }[case]
    # A 400 with nothing recorded, never a 500 (retried for days) nor a silent 200.
    with pytest.raises(WebhookBodyError):
        target.adapter_over(Scripted()).read_webhook(body)


# --- semantics against the running provider -------------------------------------------


async def test_repeated_applies_under_one_key_make_one_effect(live: Live) -> None:
    key, payload = new_key(), await live.payload()
    seen = [await live.adapter.apply(live.operation, key, payload) for _ in range(3)]
    assert [s.outcome for s in seen] == [Outcome.SUCCEEDED] * 3
    assert len({s.remote_id for s in seen}) == 1
    assert await live.effects_under(key) == 1


async def test_concurrent_applies_under_one_key_make_one_effect(live: Live) -> None:
    key, payload = new_key(), await live.payload()
    await live.slow_down(0.3)
    try:
        seen = await asyncio.gather(
            *(live.adapter.apply(live.operation, key, payload) for _ in range(6))
        )
    finally:
        await live.slow_down(0)
    # Each one either made the effect, found it made, or cannot tell yet: never refused.
    assert {s.outcome for s in seen} <= {Outcome.SUCCEEDED, Outcome.UNKNOWN}
    assert Outcome.SUCCEEDED in {s.outcome for s in seen}
    assert await live.effects_under(key) == 1
    again = await live.adapter.apply(live.operation, key, payload)
    assert again.outcome is Outcome.SUCCEEDED
    assert again.remote_id in {s.remote_id for s in seen if s.outcome is Outcome.SUCCEEDED}


async def test_the_same_key_with_another_payload_is_refused_and_makes_nothing(
    live: Live,
) -> None:
    if not getattr(live.adapter, "refuses_other_payload", True):
        pytest.skip("the provider declares it does not refuse a reused key's other payload")
    key, payload = new_key(), await live.payload()
    first = await live.adapter.apply(live.operation, key, payload)
    other = await live.adapter.apply(live.operation, key, live.other(payload))
    assert (first.outcome, other.outcome) == (Outcome.SUCCEEDED, Outcome.KEY_CONFLICT)
    # Never the first request's answer passed off as this one's.
    assert other.remote_id is None
    assert await live.effects_under(key) == 1


async def test_a_lookup_finds_what_was_applied_and_makes_nothing_more(live: Live) -> None:
    key, payload = new_key(), await live.payload()
    made = await live.adapter.apply(live.operation, key, payload)
    found = await live.adapter.lookup(live.operation, key, Sent(payload, live.now()))
    if _cannot_be_asked(live.adapter):
        assert (found.outcome, made.outcome) == (Outcome.UNAVAILABLE, Outcome.SUCCEEDED)
    else:
        assert (found.outcome, found.remote_id) == (Outcome.SUCCEEDED, made.remote_id)
    assert await live.effects_under(key) == 1


async def test_a_lookup_of_a_key_never_sent_proves_it_absent_and_sends_nothing(
    live: Live,
) -> None:
    key, payload = new_key(), await live.payload()
    retention = live.adapter.key_retention_s
    # A replaying adapter asked about a key older than its retention must not resend: the
    # provider may have pruned it, and a resend would be a new effect.
    at = live.now() - timedelta(seconds=(retention or 0) + 3600)
    seen = await live.adapter.lookup(live.operation, key, Sent(payload, at))
    expected = Outcome.UNAVAILABLE if _cannot_be_asked(live.adapter) else Outcome.ABSENT
    assert seen.outcome is expected
    assert await live.effects_under(key) == 0


async def test_the_drift_listing_shows_each_effect_under_its_key(live: Live) -> None:
    key, payload = new_key(), await live.payload()
    made = await live.adapter.apply(live.operation, key, payload)
    # As the drift scan asks: an adapter may answer a bare list or an EffectListing.
    listing = await listing_of(live.adapter, None)
    listed = [effect_from_json(raw) for raw in listing.effects]
    mine = [e for e in listed if e.idempotency_key == key]
    assert [(e.id, e.operation) for e in mine] == [(made.remote_id, live.operation)]


# --- the drift listing's window, pages and cut (targets that give ListingFacts) -------


def _listing_facts(live: Live) -> ListingFacts:
    if live.listing is None:
        pytest.skip("this target gives the kit no ListingFacts")
    return live.listing


async def _made(live: Live, count: int, apart_s: float = 0.0) -> list[str]:
    """The keys of `count` effects made one after another, `apart_s` apart."""
    facts = _listing_facts(live)
    keys = []
    for _ in range(count):
        keys.append(key := new_key())
        made = await live.adapter.apply(live.operation, key, await live.payload())
        assert made.outcome is Outcome.SUCCEEDED, made
        await facts.wait(apart_s)
    return keys


def _keys(listing: EffectListing) -> list[str]:
    return [effect_from_json(raw).idempotency_key for raw in listing.effects]


async def test_a_listing_asked_since_an_instant_lists_what_was_made_from_then_on(
    live: Live,
) -> None:
    _listing_facts(live)
    if getattr(live.adapter, "lists_since", False) is not True:
        pytest.skip("this adapter lists everything whatever the window")
    [before] = await _made(live, 1, apart_s=5)
    since = live.now()
    [after] = await _made(live, 1)
    listed = _keys(await listing_of(live.adapter, since))
    # The window alone: the effect made 5 s before it is not asked for, so not listed.
    assert after in listed and before not in listed


async def test_a_listing_longer_than_a_page_reads_every_page(live: Live) -> None:
    facts = _listing_facts(live)
    since = live.now()
    made = await _made(live, 2 * facts.page_size + 1)  # three pages, within the cap
    listing = await listing_of(live.adapter, since)
    assert set(made) <= set(_keys(listing))


async def test_a_cut_listing_covers_only_what_is_newer_than_its_oldest_effect(
    live: Live,
) -> None:
    facts = _listing_facts(live)
    # Each a second apart, so that creation instants in whole seconds still differ.
    made = await _made(live, facts.most_listed + 2, apart_s=1)
    listing = await listing_of(live.adapter, None)
    listed = [effect_from_json(raw) for raw in listing.effects]
    assert len(listed) == facts.most_listed
    if not facts.newest_first:
        # Cut in an unknown order: what it left out may be any age, so it covers nothing.
        assert listing.covered_from == NOTHING_COVERED
        return
    # Newest first: the newest effects, and it covers what is newer than its oldest one,
    # so a leg dispatched after that proves its effect missing if it is not listed.
    assert {e.idempotency_key for e in listed} == set(made[-facts.most_listed :])
    assert listing.covered_from == min(e.created_at for e in listed)


# --- a refused key sent again (targets that give RefusalFacts) -------------------------

REFUSED_AGAIN = (
    "recon relies on a provider answering a refused key's resend with its first answer, "
    "the refusal, and making nothing (docs/providers.md, the adapter table's `apply` row). "
    "recon fails the transaction on the first refusal, but the request may be sent again "
    "under the same key afterwards (a zombie decider's call begun before its partition's "
    "new owner fenced it, a redelivery's resend): judged afresh, it makes the effect after "
    "the transaction failed, and nothing undoes it (a charge left in place). Make the "
    "provider keep a refusal under its idempotency key as it keeps a success (Stripe "
    "replays a key's first answer, errors included, for 24 h); if the provider itself "
    "cannot, recon cannot be pointed at it safely for operations it may refuse."
)


def _refusal_facts(live: Live) -> tuple[RefusalFacts, ...]:
    if not live.refusals:
        pytest.skip("this target gives the kit no RefusalFacts (how to make a refusal)")
    return live.refusals


def _shown(seen: Seen) -> str:
    return (seen.error or repr(seen.body))[:200]


async def refused_again(live: Live, facts: RefusalFacts) -> None:
    """The check itself, also run against a provider that judges a refused key afresh
    (test_the_kit_fails_a_provider_that_judges_a_refused_key_afresh)."""
    key, payload = new_key(), await facts.refused()
    first = await live.adapter.apply(facts.operation, key, payload)
    assert first.outcome is Outcome.REJECTED, (
        f"{facts.operation}: RefusalFacts.refused was not refused: {first}"
    )
    await facts.lift(payload)
    again = await live.adapter.apply(facts.operation, key, payload)
    made = await live.effects_under(key)
    assert (again.outcome, again.status_code, again.error, made) == (
        first.outcome,
        first.status_code,
        first.error,
        0,
    ), (
        f"{facts.operation}: the key refused first ({first.status_code} {_shown(first)}) "
        f"was answered {again.outcome.value} ({again.status_code} {_shown(again)}) when sent "
        f"again after the cause of the refusal was lifted, with {made} effect(s) under it. "
        + REFUSED_AGAIN
    )
    # The lift did lift: the same request under a new key is made now, so a provider
    # judging the resend afresh would have made it too (the check above could fail).
    control = await live.adapter.apply(facts.operation, new_key(), payload)
    assert control.outcome is Outcome.SUCCEEDED, (
        f"{facts.operation}: RefusalFacts.lift did not lift the refusal (a new key was "
        f"answered {control}), "
        "so the check proves nothing"
    )


async def test_a_refused_key_sent_again_is_refused_again_and_makes_nothing(live: Live) -> None:
    for facts in _refusal_facts(live):
        await refused_again(live, facts)


async def test_the_kit_fails_a_provider_that_judges_a_refused_key_afresh() -> None:
    # The check's own teeth: Acme keeping no refusal under its key (a test-only mode)
    # makes the restocked reserve when the refused key is sent again.
    async with AFRESH.running() as running:
        with pytest.raises(AssertionError, match=r"answered succeeded .* 1 effect\(s\)"):
            [facts] = _refusal_facts(running)
            await refused_again(running, facts)


# --- replay: inside and outside the key retention -------------------------------------


@pytest.fixture(scope="module", params=REPLAYING, ids=_ids)
async def replaying(request: pytest.FixtureRequest) -> AsyncIterator[Live]:
    chosen: KitTarget = request.param
    async with chosen.running() as running:
        assert running.expire_keys is not None, "a replaying target moves its clock"
        yield running


async def test_inside_the_retention_a_replay_lookup_answers_the_first_effect(
    replaying: Live,
) -> None:
    live = replaying
    key, payload = new_key(), await live.payload()
    sent_at = live.now()
    made = await live.adapter.apply(live.operation, key, payload)
    found = await live.adapter.lookup(live.operation, key, Sent(payload, sent_at))
    assert (found.outcome, found.remote_id) == (Outcome.SUCCEEDED, made.remote_id)
    assert await live.effects_under(key) == 1


async def test_past_the_retention_a_lookup_never_resends_and_still_finds_the_effect(
    replaying: Live,
) -> None:
    live = replaying
    key, payload = new_key(), await live.payload()
    sent_at = live.now()
    made = await live.adapter.apply(live.operation, key, payload)
    assert live.expire_keys is not None
    live.expire_keys()  # the provider prunes the key: a resend now would be a new effect
    found = await live.adapter.lookup(live.operation, key, Sent(payload, sent_at))
    assert (found.outcome, found.remote_id) == (Outcome.SUCCEEDED, made.remote_id)
    assert await live.effects_under(key) == 1
