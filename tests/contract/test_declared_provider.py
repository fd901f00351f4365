"""The `declared` adapter against the Acme fake (tests/support/acme_fake.py), for what the
contract kit does not ask of every adapter: rate limits waited out, a listing read page by
page, a fire-and-forget answer declared final, and where the credential comes from."""

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.acme_fake import API_KEY, Acme, running_acme
from support.acme_targets import ACME_FILE, QUERY_LOOKUP, acme_file
from support.provider_kit import Scripted

from events.inputs import Outcome
from reconcilers.drift import effect_from_json
from services.providers.declared.adapter import DeclaredAdapter
from services.providers.declared.locate import parse
from services.providers.http import ProviderHttp
from services.providers.interface import NOTHING_COVERED, AdapterSetupError, ProviderSetup, Sent
from services.providers.lookup_strategy import CANNOT_BE_ASKED

CHARGE = {"amount": 700, "currency": "eur", "customer": "cus_1"}


def _key() -> str:
    return f"acme-{uuid.uuid4()}"


async def test_a_rate_limit_is_waited_out_under_the_same_key_never_a_failure() -> None:
    async with running_acme(Acme(rate_limited=2)) as (acme, url), ProviderHttp(5.0) as http:
        adapter = DeclaredAdapter(acme_file(), http, url, API_KEY)
        key = _key()
        seen = await adapter.apply("payments.charge", key, CHARGE)
        assert seen.outcome is Outcome.SUCCEEDED
        assert acme.requests == 3 and len(acme.under(key)) == 1


async def test_a_rate_limit_longer_than_the_declared_wait_is_unknown_not_a_failure() -> None:
    async with running_acme(Acme(rate_limited=10)) as (acme, url), ProviderHttp(5.0) as http:
        adapter = DeclaredAdapter(acme_file(), http, url, API_KEY)
        seen = await adapter.apply("payments.charge", _key(), CHARGE)
        # The declared bound is 3 s at 1 s a wait: then unknown, for a lookup later.
        assert (seen.outcome, seen.status_code, seen.alarm) == (Outcome.UNKNOWN, 429, None)
        assert acme.requests == 3


async def test_the_listing_reads_every_page() -> None:
    async with running_acme() as (_acme, url), ProviderHttp(5.0) as http:
        adapter = DeclaredAdapter(acme_file(), http, url, API_KEY)
        keys = [_key() for _ in range(120)]  # three pages of 50
        for key in keys:
            assert (
                await adapter.apply("email.send", key, {"to": "a@b.c", "template": "t"})
            ).outcome is Outcome.SUCCEEDED
        listing = await adapter.list_effects()
        listed = [effect_from_json(raw) for raw in listing.effects]
        assert sorted(e.idempotency_key for e in listed) == sorted(keys)
        assert {e.operation for e in listed} == {"email.send"}
        assert listing.covered_from is None

        # Two pages of three: the listing is cut, and says so. The file does not say in
        # which order the provider lists, so the cut covers no leg's absence.
        assert adapter.declared.listing is not None
        capped = adapter.declared.listing.model_copy(update={"max_pages": 2})
        adapter.declared = adapter.declared.model_copy(update={"listing": capped})
        listing = await adapter.list_effects()
        assert len(listing.effects) == 100 and listing.covered_from == NOTHING_COVERED


async def test_a_202_is_final_only_where_the_file_says_so() -> None:
    async with running_acme() as (_acme, url), ProviderHttp(5.0) as http:
        adapter = DeclaredAdapter(acme_file(), http, url, API_KEY)
        sent = await adapter.apply("email.send", _key(), {"to": "a@b.c", "template": "t"})
        assert (sent.outcome, sent.status_code) == (Outcome.SUCCEEDED, 202)


async def test_a_wrong_credential_is_unknown_with_an_alarm() -> None:
    async with running_acme() as (acme, url), ProviderHttp(5.0) as http:
        adapter = DeclaredAdapter(acme_file(), http, url, "not-the-key")
        seen = await adapter.apply("payments.charge", _key(), CHARGE)
        assert (seen.outcome, seen.status_code) == (Outcome.UNKNOWN, 401) and seen.alarm
        assert acme.records == []


def _setup(tmp_path: Path, secret: str | None) -> ProviderSetup:
    path = tmp_path / "acme.toml"
    text = (Path(__file__).resolve().parents[2] / "docs/examples/acme.toml").read_text()
    path.write_text(
        text.replace('# file = "/run/secrets/acme_api_key"', f'file = "{tmp_path}/key"')
    )
    # Making the adapter sends nothing: a scripted client that was never asked will do.
    return ProviderSetup(
        "acme", "http://acme.invalid", http=Scripted(), secret=secret, declaration=str(path)
    )


def test_the_credential_comes_from_the_configuration_the_environment_or_a_secrets_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACME_API_KEY", raising=False)
    with pytest.raises(AdapterSetupError, match="cannot read its secrets file"):
        DeclaredAdapter.from_setup(_setup(tmp_path, None))
    (tmp_path / "key").write_text("from-file\n")
    assert DeclaredAdapter.from_setup(_setup(tmp_path, None)).headers == {"X-Acme-Key": "from-file"}
    monkeypatch.setenv("ACME_API_KEY", "from-env")
    assert DeclaredAdapter.from_setup(_setup(tmp_path, None)).headers == {"X-Acme-Key": "from-env"}
    configured = DeclaredAdapter.from_setup(_setup(tmp_path, "configured"))
    assert configured.headers == {"X-Acme-Key": "configured"}


async def test_past_the_retention_a_replay_provider_without_a_query_is_never_resent() -> None:

    text = ACME_FILE.read_text(encoding="utf-8")
    head, _, rest = text.partition(QUERY_LOOKUP)
    replay_only = head + '[lookup]\nstrategy = "replay"\nkey_retention = "1h"\n'
    declared = parse(replay_only + rest[rest.index("\n[listing]") :], "replay.toml")
    http = Scripted(201, b'{"result": {"record": {"ref": "pay_1", "phase": "done"}}}')
    adapter = DeclaredAdapter(declared, http, "http://acme.invalid", API_KEY)
    inside = Sent(CHARGE, datetime.now(UTC) - timedelta(minutes=59))
    assert (await adapter.lookup("payments.charge", "k", inside)).remote_id == "pay_1"
    assert http.requests == 1  # inside the retention: the identical request, resent
    past = Sent(CHARGE, datetime.now(UTC) - timedelta(minutes=61))
    seen = await adapter.lookup("payments.charge", "k", past)
    assert seen.outcome is Outcome.UNAVAILABLE and CANNOT_BE_ASKED in (seen.error or "")
    assert http.requests == 1  # past it: nothing sent, a person decides


async def test_a_rate_limited_lookup_is_deferred_not_waited_out() -> None:
    async with running_acme(Acme(rate_limited=1)) as (acme, url), ProviderHttp(5.0) as http:
        adapter = DeclaredAdapter(acme_file(), http, url, API_KEY)
        seen = await adapter.lookup("payments.charge", _key())
        # Unavailable at once: the pull reconciler's back-off asks again later.
        assert (seen.outcome, seen.status_code, seen.alarm) == (Outcome.UNAVAILABLE, 429, None)
        assert acme.requests == 1
