"""Provider files (services.providers.declared): every mistake is refused at start-up
naming the file and its line; the file configures its provider; what an apply sends and
what an answer means are the file's rules. Pure: no I/O but reading files."""

from pathlib import Path

import pytest

from events.inputs import Outcome
from services.config import ConfigError, load_settings
from services.providers.declared import answers, requests
from services.providers.declared.locate import DeclarationError, parse
from services.providers.declared.model import ProviderFile

ACME = Path(__file__).resolve().parents[2] / "docs" / "examples" / "acme.toml"
TEXT = ACME.read_text(encoding="utf-8")


def _line(text: str, fragment: str) -> int:
    return text[: text.index(fragment)].count("\n") + 1


def _refused(text: str) -> str:
    with pytest.raises(DeclarationError) as refused:
        parse(text, "acme.toml")
    return str(refused.value)


def test_the_shipped_example_is_valid() -> None:
    declared = parse(TEXT, "acme.toml")
    assert set(declared.operations) >= {"inventory.reserve", "payments.charge", "email.send"}


@pytest.mark.parametrize(
    ("original", "mistake", "says"),
    [
        ('path = "/api/v2/payments"', 'path = "/api/v2/payments"\nmethod = "FETCH"', "method"),
        ('means = "refused"', 'means = "refusal"', "means"),
        ('max_wait = "3s"', 'max_wait = "3 weeks"', "not a duration"),
        ('body = "/request_id"', 'body = "request_id"', "JSON pointer"),
        ('fields.qty = { type = "integer"', 'fields.qty = { type = "int"', "fields.qty.type"),
        ('payment = "payments.charge"', 'payment = "payments.chrage"', "not an operation"),
        ('compensation = "payments.refund"', 'compensation = "refund"', "compensation"),
        ('format = "{secret}"', 'format = "{secret}"\nsecret = "acme_live_key"', "not a key"),
        # A rule across keys of a table names the table's line.
        ('[lookup]\nstrategy = "query"', '[lookup]\nstrategy = "replay"', "key_retention"),
        ("[listing]", "[listing", "not valid TOML"),
    ],
)
def test_a_mistake_is_refused_naming_its_line(original: str, mistake: str, says: str) -> None:
    assert original in TEXT
    text = TEXT.replace(original, mistake, 1)
    message = _refused(text)
    last = mistake.splitlines()[-1]
    expected = _line(text, "[lookup]" if last.startswith("strategy") else last)
    assert message.startswith(f"acme.toml:{expected}:"), message
    assert says in message


def test_a_missing_table_points_at_where_it_belongs() -> None:
    text = TEXT.replace("[idempotency]\n", "[idempotency_key]\n")
    message = _refused(text)
    assert "idempotency: required, and missing" in message
    assert f"acme.toml:{_line(text, '[idempotency_key]')}:" in message  # the typo'd table


def test_a_credential_written_in_the_file_is_refused() -> None:
    # Credentials come from RECON_PROVIDER_SECRETS, the environment or a secrets file.
    text = TEXT.replace('header = "X-Acme-Key"', 'header = "X-Acme-Key"\nsecret = "k"')
    assert "credentials.secret: not a key" in _refused(text)


def test_a_file_configures_its_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_PROVIDER_FILES", f"acme={ACME}")
    settings = load_settings()
    assert settings.provider_adapters["acme"] == "declared"
    assert settings.providers["acme"] == "http://127.0.0.1:8095"
    assert settings.provider_files == {"acme": str(ACME)}
    # Its webhooks may arrive for 7 days: recon keeps its dedupe at least that long.
    assert settings.webhook_dedupe_horizon_s >= 7 * 86400


def test_a_mistake_in_a_configured_file_stops_start_up_naming_the_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bad = tmp_path / "acme.toml"
    bad.write_text(TEXT.replace('class = "write"', 'class = "wirte"', 1))
    monkeypatch.setenv("RECON_PROVIDER_FILES", f"acme={bad}")
    with pytest.raises(ConfigError) as refused:
        load_settings()
    assert f"{bad}:{_line(TEXT, 'class = ')}: operations" in str(refused.value)


def test_a_file_and_another_adapter_for_one_provider_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RECON_PROVIDER_FILES", f"acme={ACME}")
    monkeypatch.setenv("RECON_PROVIDER_ADAPTERS", "acme=stripe")
    with pytest.raises(ConfigError, match="drop one"):
        load_settings()


def _acme() -> ProviderFile:
    return parse(TEXT, "acme.toml")


def test_the_request_carries_the_key_where_the_file_says_and_escapes_the_path() -> None:
    declared = _acme()
    refund = declared.operations["payments.refund"]
    payload = {"amount": 5, "reverses": {"op_key": "k0", "remote_id": "pay_1/../../records?"}}
    built = requests.build(declared, refund, "op-1", payload)
    assert built.path == "/api/v2/payments/pay_1%2F..%2F..%2Frecords%3F/refunds"
    assert built.body == {
        "money": {"amount_cents": 5},
        "request_id": "op-1",
        "meta": {"recon_ref": "op-1"},
    }
    assert built.headers == {}


def test_an_answer_means_what_the_rules_say() -> None:
    declared = _acme()
    charge, email = declared.operations["payments.charge"], declared.operations["email.send"]
    done = {"result": {"record": {"ref": "pay_9", "phase": "done"}}}
    assert answers.classify(declared, charge, 201, done).remote_id == "pay_9"
    assert answers.classify(declared, charge, 202, None).outcome is Outcome.UNKNOWN
    # email.send declares its 202 final: fire and forget, nothing more will be told.
    assert answers.classify(declared, email, 202, None).outcome is Outcome.SUCCEEDED
    declined = {"problem": {"code": "card_declined"}}
    assert answers.classify(declared, charge, 422, declined).outcome is Outcome.REJECTED
    # A 422 no rule lists is not evidence of absence.
    other = {"problem": {"code": "something_new"}}
    assert answers.classify(declared, charge, 422, other).outcome is Outcome.UNKNOWN
    # A 429 is timing, whatever a rule says.
    assert answers.classify(declared, charge, 429, declined).outcome is Outcome.UNKNOWN


def test_the_files_operations_are_its_catalog() -> None:
    from services.providers.declared.adapter import declared_operations

    charge = declared_operations(str(ACME))["payments.charge"]
    assert (charge.side_effect.value, charge.compensation, charge.amount_field) == (
        "write",
        "payments.refund",
        "amount",
    )
    assert charge.payload_schema is not None
    assert charge.payload_schema["required"] == ["amount", "currency", "customer"]
    assert charge.payload_schema["properties"]["amount"] == {"type": "integer", "minimum": 1}
