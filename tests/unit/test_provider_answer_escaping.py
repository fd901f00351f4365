"""A provider's answer is evidence: one holding a lone surrogate or a numeric id becomes an
observation that can be written to Kafka, never a crash (issue 7, item 13)."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from support.unencodable_bodies import UNENCODABLE_BODIES

from events.inputs import Outcome, Source
from events.observation import observation
from services.providers.adapters import SandboxAdapter
from services.providers.http import Answer


class Provider:
    """Answers every request with the same status and body, as the bytes a provider sent."""

    def __init__(self, status: int, body: bytes) -> None:
        self.answer = Answer(status, body)

    async def request(self, method: str, url: str, **_: Any) -> Answer:
        return self.answer


async def test_a_provider_answer_with_a_lone_surrogate_becomes_a_writable_observation() -> None:
    raw = b'{"id": "ch_\\ud800", "status": "succeeded", "note": "x\\udfff"}'

    seen = await SandboxAdapter(Provider(200, raw), "http://provider").apply(
        "payments.charge", "key-1", {"amount": 1}
    )
    assert seen.outcome is Outcome.SUCCEEDED
    sighting = observation(
        message_id="m",
        tenant="demo",
        tx_id="tx",
        action="charge",
        op_key="key-1",
        attempt=1,
        source=Source.RESPONSE,
        seen=seen,
        observed_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    written = json.loads(sighting.model_dump_json())
    assert written["remote_id"] == "ch_\\ud800"
    assert written["body"]["note"] == "x\\udfff"


async def test_a_numeric_provider_id_is_kept_as_text() -> None:
    answer = json.dumps({"id": 12345, "status": "succeeded"}).encode()
    seen = await SandboxAdapter(Provider(200, answer), "http://provider").apply(
        "payments.charge", "k", {}
    )
    assert seen.remote_id == "12345"


@pytest.mark.parametrize("body", UNENCODABLE_BODIES)
def test_every_lone_surrogate_and_nul_an_answer_can_carry_is_escaped(body: bytes) -> None:
    # The walk over the strings is spared only for answers that cannot hold one
    # (events.safe_json.escaped_of): each of these must still be walked and escaped.
    read = json.dumps(Answer(200, body).json(), ensure_ascii=False)

    assert read.encode("utf-8")
    assert "\x00" not in read
