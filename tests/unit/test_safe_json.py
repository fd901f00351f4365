"""Bad provider data is recorded escaped, never a crash: lone surrogates in parsed JSON."""

import json
from datetime import UTC, datetime
from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st

from events.inputs import OperationObserved, Outcome, Source
from events.safe_json import encodable
from services.dispatcher.adapters import SandboxAdapter

# Every code point, lone surrogates (category Cs) included: what json.loads can return.
any_text = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=20,
)
encodable_text = st.text()  # hypothesis leaves surrogates out by default
encodable_values = st.recursive(
    st.none() | st.booleans() | st.integers() | encodable_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(encodable_text, inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_whatever_json_loads_returns_can_be_written_as_utf8(value: Any) -> None:
    json.dumps(encodable(value), ensure_ascii=False).encode("utf-8")


@given(encodable_values)
def test_encodable_data_is_kept_as_it_is(value: Any) -> None:
    assert encodable(value) == value


def test_a_lone_surrogate_is_kept_as_the_escape_a_person_reads() -> None:
    parsed = json.loads('{"id": "ch_\\ud800", "\\udfff": ["a\\ud800b"]}')
    assert encodable(parsed) == {"id": "ch_\\ud800", "\\udfff": ["a\\ud800b"]}


async def test_a_provider_answer_with_a_lone_surrogate_becomes_a_writable_observation() -> None:
    raw = b'{"id": "ch_\\ud800", "status": "succeeded", "note": "x\\udfff"}'

    def provider(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=raw, headers={"content-type": "application/json"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(provider)) as client:
        seen = await SandboxAdapter(client, "http://provider").apply(
            "payments.charge", "key-1", {"amount": 1}
        )
    assert seen.outcome is Outcome.SUCCEEDED
    observation = OperationObserved(
        message_id="m",
        tenant="demo",
        tx_id="tx",
        action="charge",
        op_key="key-1",
        attempt=1,
        source=Source.RESPONSE,
        outcome=seen.outcome,
        status_code=seen.status_code,
        remote_id=seen.remote_id,
        body=seen.body,
        observed_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    written = json.loads(observation.model_dump_json())
    assert written["remote_id"] == "ch_\\ud800"
    assert written["body"]["note"] == "x\\udfff"


async def test_a_numeric_provider_id_is_kept_as_text() -> None:
    def provider(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": 12345, "status": "succeeded"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(provider)) as client:
        seen = await SandboxAdapter(client, "http://provider").apply("payments.charge", "k", {})
    assert seen.remote_id == "12345"
