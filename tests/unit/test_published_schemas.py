"""The published schemas (docs/openapi.json, docs/asyncapi.json) are what the code
generates, and valid: the OpenAPI document by openapi-spec-validator, the AsyncAPI one by
its structure (every reference resolves, every operation sends a message of its own
channel), every message schema is a valid JSON schema, and real messages built by the
code validate against the schema of the topic they travel on."""

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator, Draft202012Validator
from openapi_spec_validator import validate as validate_openapi
from referencing import Registry
from referencing.jsonschema import DRAFT202012
from support.catalogs import SANDBOX

from events.drift import DriftDetected, DriftKind, drift_id
from events.envelope import GENESIS_HASH, seal
from events.transaction_events import TransactionAccepted, TransactionCommitted
from services.contract.schemas import DOCS, GENERATED, render, stale
from services.intake.example import example_transaction
from services.intake.submission import SubmissionRequest, operation_specs, submit_command

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _load(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((DOCS / name).read_text())
    return document


@pytest.fixture(scope="module")
def asyncapi() -> dict[str, Any]:
    return _load("asyncapi.json")


def test_checked_in_schemas_are_what_the_code_generates() -> None:
    assert stale() == [], (
        "docs/ is stale: run `uv run python -m services.contract.schemas --write` and commit"
    )


def test_a_drifted_file_is_detected(tmp_path: Path) -> None:
    for name, generate in GENERATED.items():
        (tmp_path / name).write_text(render(generate()))
    assert stale(tmp_path) == []
    document = json.loads((tmp_path / "asyncapi.json").read_text())
    document["components"]["schemas"]["SubmitTransaction"]["properties"].pop("tx_id")
    (tmp_path / "asyncapi.json").write_text(render(document))
    assert stale(tmp_path) == ["asyncapi.json"]


def test_the_openapi_document_is_valid() -> None:
    document = _load("openapi.json")
    validate_openapi(document)
    assert "/v1/transactions" in document["paths"]


def _resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        assert isinstance(node, dict) and part in node, f"{ref} does not resolve"
        node = node[part]
    return node


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [ref for value in node.values() for ref in _refs(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs(value)]
    return []


def test_the_asyncapi_document_is_well_formed(asyncapi: dict[str, Any]) -> None:
    assert asyncapi["asyncapi"] == "3.0.0"
    assert asyncapi["info"]["title"] and asyncapi["info"]["version"]
    for ref in _refs(asyncapi):
        _resolve(asyncapi, ref)
    addresses = {channel["address"] for channel in asyncapi["channels"].values()}
    assert addresses == {
        "recon.commands",
        "recon.observations",
        "recon.events",
        "recon.checkpoints",
        "recon.drift",
        "recon.dead-letters",
        "recon.governance",
        "recon.intents.{tenant}",
        "recon.intent-replies.{tenant}",
    }
    for channel in asyncapi["channels"].values():
        # AsyncAPI 3: every {name} in an address is a declared parameter.
        named = set(re.findall(r"{(\w+)}", channel["address"]))
        assert named == set(channel.get("parameters", {})), channel["address"]
    for name, operation in asyncapi["operations"].items():
        assert operation["action"] in ("send", "receive"), name
        channel = operation["channel"]["$ref"]
        assert operation["messages"], name
        for message in operation["messages"]:
            # AsyncAPI 3: an operation's messages are those of its own channel.
            assert message["$ref"].startswith(channel + "/messages/"), (name, message)
    for name, message in asyncapi["components"]["messages"].items():
        assert message["name"] == name and "payload" in message, name


def test_every_message_schema_is_a_valid_json_schema(asyncapi: dict[str, Any]) -> None:
    schemas = asyncapi["components"]["schemas"]
    payloads = [m["payload"] for m in asyncapi["components"]["messages"].values()]
    for schema in [*schemas.values(), *payloads]:
        # AsyncAPI's schema format is a superset of draft 7; pydantic writes 2020-12.
        Draft7Validator.check_schema(schema)
        Draft202012Validator.check_schema(schema)


def _validator(asyncapi: dict[str, Any], message: str) -> Draft202012Validator:
    registry: Registry[Any] = Registry().with_resource(
        "urn:recon:asyncapi", DRAFT202012.create_resource(asyncapi)
    )
    pointer = f"urn:recon:asyncapi#/components/messages/{message}/payload"
    return Draft202012Validator({"$ref": pointer}, registry=registry)


def test_messages_the_code_writes_match_their_published_schema(
    asyncapi: dict[str, Any],
) -> None:
    submission = SubmissionRequest.model_validate(example_transaction())
    specs = operation_specs(submission, tenant="demo", environment="dev", catalog=SANDBOX)
    command = submit_command(
        submission, tenant="demo", fingerprint="f" * 64, operations=specs, issued_at=NOW
    )
    envelopes = seal(
        tenant="demo",
        tx_id="order-42",
        last_seq=0,
        last_hash=GENESIS_HASH,
        events=[
            TransactionAccepted(agent_id="agent-7", fingerprint="f" * 64, operations=specs),
            TransactionCommitted(),
        ],
        causation_id=command.message_id,
        occurred_at=NOW,
    )
    drift = DriftDetected(
        drift_id=drift_id(DriftKind.MISMATCH, "sandbox", "eff_1"),
        kind=DriftKind.MISMATCH,
        provider="sandbox",
        detail={"fields": ["amount"]},
        detected_at=NOW.isoformat(),
    )
    written = [
        ("SubmitTransaction", command),
        ("TransactionAccepted", envelopes[0]),
        ("TransactionCommitted", envelopes[1]),
        ("DriftDetected", drift),
    ]
    for message, model in written:
        value = json.loads(model.model_dump_json())
        errors = list(_validator(asyncapi, message).iter_errors(value))
        assert errors == [], (message, [e.message for e in errors])
    # The event's type is pinned by its message: an envelope does not match another's.
    assert list(
        _validator(asyncapi, "TransactionCommitted").iter_errors(
            json.loads(envelopes[0].model_dump_json())
        )
    )


def test_the_checkpoint_described_is_the_one_the_decider_signs() -> None:
    # recon.checkpoints' message is described by a model nothing parses with: a checkpoint
    # as events.checkpoint writes it must fit it, member for member.
    from events.checkpoint import Head, sign_checkpoint
    from services.contract.asyncapi import ChainCheckpoint
    from services.signing_keys import development_key

    head = Head("acme", "tx-1", 3, "ab" * 32)
    signed = sign_checkpoint(development_key(), "2026-12-03T00:00:00+00:00", [head])
    assert ChainCheckpoint.model_validate(signed).model_dump(exclude_unset=True) == signed
    linked = sign_checkpoint(development_key(), "2026-12-03T00:00:00+00:00", [head], "cd" * 32)
    assert ChainCheckpoint.model_validate(linked).model_dump() == linked
