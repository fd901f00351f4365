"""The intake checks a submission under its tenant's policy as this process last read it
(services.intake.policy_cache), so that a submission costs no statement to read it (issue
24, item 5), and records the intent only while that policy is still the one in force
(services.intake.intents.stamp_in_force): a policy installed through another intake
process, which this one never heard of, governs the very next submission, on the one
statement path of a new tx_id and on the transaction that claims natural keys alike.
"""

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from support.intake_app import intake_client, settings_fixture

from events.policy import AgentPolicy, PolicyDocument
from services.config import Settings
from services.governance import store
from services.intake.example import example_transaction

ACME = {"Authorization": "Bearer key-acme"}
AGENT = "agent-7"  # example_transaction's
EXAMPLE_OPERATIONS = ("inventory.reserve", "payments.charge", "email.send")

settings = settings_fixture()


@pytest.fixture
async def conn(settings: Settings) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(settings.database_url)
    try:
        yield conn
    finally:
        await conn.close()


async def installed_elsewhere(conn: asyncpg.Connection, version: int, *grants: str) -> None:
    """What another intake's PUT /v1/policy writes (services.intake.policy.install_policy)."""
    document = PolicyDocument(version=version, agents={AGENT: AgentPolicy(grants=grants)})
    async with conn.transaction():
        assert await store.replace_policy(conn, "acme", document, "another intake")


async def submit(http: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    return await http.post("/v1/transactions", json=body, headers=ACME)


async def recorded(conn: asyncpg.Connection, tx_id: str) -> int:
    found = await conn.fetchval(
        "SELECT count(*) FROM intents WHERE tenant = 'acme' AND tx_id = $1", tx_id
    )
    return int(found)


def with_natural_key(tx_id: str) -> dict[str, Any]:
    body = example_transaction(tx_id)
    body["steps"][1]["natural_key"] = f"invoice-{tx_id}"
    return body


async def test_a_policy_installed_by_another_intake_governs_the_next_submission(
    settings: Settings, conn: asyncpg.Connection
) -> None:
    async with intake_client(settings) as http:
        # This intake reads the open policy (none installed) and keeps it.
        first = await submit(http, example_transaction("cached-1"))
        assert first.status_code == 202, first.text

        await installed_elsewhere(conn, 1, "payments.refund")

        refused = await submit(http, example_transaction("cached-2"))
        assert refused.status_code == 403, refused.text
        assert (refused.json()["error"], refused.json()["policy_version"]) == ("not_granted", 1)
        assert await recorded(conn, "cached-2") == 0

        # Granted again by version 2: accepted, and recorded under the version it was
        # checked by.
        await installed_elsewhere(conn, 2, *EXAMPLE_OPERATIONS)
        accepted = await submit(http, example_transaction("cached-3"))
        assert accepted.status_code == 202, accepted.text
        version = await conn.fetchval(
            "SELECT policy_version FROM intents WHERE tenant = 'acme' AND tx_id = 'cached-3'"
        )
        assert version == 2


async def test_a_submission_claiming_natural_keys_is_held_to_the_policy_in_force_too(
    settings: Settings, conn: asyncpg.Connection
) -> None:
    await installed_elsewhere(conn, 1, *EXAMPLE_OPERATIONS)
    async with intake_client(settings) as http:
        first = await submit(http, with_natural_key("keyed-1"))
        assert first.status_code == 202, first.text

        await installed_elsewhere(conn, 2, "payments.refund")

        refused = await submit(http, with_natural_key("keyed-2"))
        assert refused.status_code == 403, refused.text
        assert refused.json()["policy_version"] == 2
        assert await recorded(conn, "keyed-2") == 0
        claims = await conn.fetchval(
            "SELECT count(*) FROM natural_keys WHERE tenant = 'acme' AND tx_id = 'keyed-2'"
        )
        assert claims == 0
