"""The AsyncAPI 3.0 document of recon's Kafka topics, generated from the message models
(docs/asyncapi.json; `python -m services.contract.schemas --write` writes it).

Every message schema is the pydantic model's own JSON schema, and the lists of commands
and events are read from the discriminated unions the consumers parse with
(`events.inputs.Command`, `events.transaction_events.Event`), so a new message type or
field appears here, and the drift test fails until the checked-in file is regenerated.
recon.decider-state (the decider's private changelog) is not an interface and is left out.
"""

from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from events.dead_letters import CONSUMER, ORIGIN, REASON
from events.drift import DriftDetected
from events.envelope import Envelope
from events.event_type_header import EVENT_TYPE
from events.governance import GovernanceChange
from events.inputs import Command, OperationObserved
from events.topics import PARTITIONS, Topics
from events.transaction_events import Event
from services.config import load_settings
from services.intake.openapi_catalog import with_catalog
from services.intake.response_models import IntentRefused, SubmissionAccepted
from services.intake.submission import SubmissionRequest
from services.providers.registry import catalog_of

SCHEMAS = "#/components/schemas/{model}"
KAFKA_BINDING_VERSION = "0.5.0"
TX_KEY = "`tenant/tx_id`: every message of one transaction is on one partition, in order"


class OmittedValue(BaseModel):
    """The value of a dead letter whose record was over the decider's size bound: the
    record itself stays on its topic forever, at the `origin` header."""

    model_config = ConfigDict(extra="forbid")

    omitted_bytes: int = Field(description="size of the record's value")
    sha256: str = Field(description="hex SHA-256 of the record's value")


class ChainHead(BaseModel):
    """One transaction's chain head a checkpoint signs."""

    model_config = ConfigDict(extra="forbid")

    tenant: str
    tx_id: str
    seq: int = Field(description="the seq of the transaction's last event the decider wrote")
    hash: str = Field(description="that event's hash (hex SHA-256)")


class ChainCheckpoint(BaseModel):
    """The decider's signed statement of the chain heads it wrote (events.checkpoint,
    specified byte for byte in docs/receipts.md). Described here, not parsed through this
    model: audit verify and the bundle verifiers read the record's JSON as signed."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(description='"ChainCheckpoint"')
    schema_version: int = Field(description="1")
    canon: str = Field(
        description='"jcs": the signed bytes are the JCS form of the record without `signature`'
    )
    key_id: str = Field(description="first 16 hex digits of sha256(the raw Ed25519 public key)")
    signed_at: str = Field(description="ISO 8601 time of signing")
    heads: list[ChainHead] = Field(description="in (tenant, tx_id) order, at most 1000")
    prev_checkpoint: str | None = Field(
        default=None,
        description="hex SHA-256 of the value of the checkpoint record the same decider wrote "
        "before this one on this partition; absent on the first after it took the partition, "
        "and on checkpoints written before links (docs/receipts.md)",
    )
    signature: str = Field(description="base64 Ed25519 signature over the signed bytes")


def _members(union: Any) -> list[type[BaseModel]]:
    """The models of a (possibly Annotated) union, in declaration order."""
    if get_origin(union) is Annotated:
        union = get_args(union)[0]  # Annotated[A | B, Field(discriminator=...)]
    return [a for a in get_args(union) if isinstance(a, type) and issubclass(a, BaseModel)]


COMMANDS = _members(Command)
GOVERNANCE = _members(GovernanceChange)
EVENTS = _members(Event)


def _message(name: str, payload: dict[str, Any], summary: str, key: str) -> dict[str, Any]:
    return {
        "name": name,
        "title": name,
        "summary": summary,
        "contentType": "application/json",
        "payload": payload,
        "bindings": {
            "kafka": {
                "key": {"type": "string", "description": key},
                "bindingVersion": KAFKA_BINDING_VERSION,
            }
        },
    }


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": SCHEMAS.format(model=model.__name__)}


def _doc(model: type[BaseModel]) -> str:
    return (model.__doc__ or model.__name__).strip().splitlines()[0]


def _event_message(event: type[BaseModel]) -> dict[str, Any]:
    name = event.__name__
    # The envelope carries the event's body as `data` and its discriminator as `type`.
    payload = {
        "allOf": [
            _ref(Envelope),
            {
                "type": "object",
                "properties": {"type": {"const": name}, "data": _ref(event)},
            },
        ]
    }
    message = _message(name, payload, _doc(event), TX_KEY)
    message["headers"] = {
        "type": "object",
        "properties": {
            EVENT_TYPE: {
                "type": "string",
                "const": name,
                "description": "the envelope's `type`, outside the JSON, so a consumer can pass "
                "over the events it does not act on without parsing them; absent on records "
                "written before it existed (decode those)",
            }
        },
    }
    return message


def _dead_letter_message() -> dict[str, Any]:
    message = _message(
        "DeadLetter",
        {
            "description": "the unreadable record's own value, byte for byte (any content), "
            "or, when the `value-omitted` header is present, an OmittedValue "
            "(#/components/schemas/OmittedValue)"
        },
        "an input a consumer could not act on, set aside so its partition moves on",
        "the unreadable record's own key, untouched",
    )
    message["contentType"] = "application/octet-stream"
    message["headers"] = {
        "type": "object",
        "properties": {
            REASON: {"type": "string", "description": "why it was set aside"},
            ORIGIN: {"type": "string", "description": "`topic:partition:offset` of the record"},
            CONSUMER: {"type": "string", "description": "the consumer group that judged it"},
            "value-omitted": {"type": "string", "description": "`true` when over the bound"},
        },
        "required": [REASON, ORIGIN, CONSUMER],
    }
    return message


def _channel(address: str, description: str, messages: dict[str, dict[str, Any]]) -> dict[str, Any]:
    channel: dict[str, Any] = {
        "address": address,
        "description": description,
        "messages": {name: {"$ref": f"#/components/messages/{name}"} for name in messages},
        "bindings": {
            "kafka": {
                "topic": address,
                "partitions": PARTITIONS,
                "bindingVersion": KAFKA_BINDING_VERSION,
            }
        },
    }
    if "{tenant}" in address:
        # AsyncAPI 3: every {name} in an address is declared as a parameter.
        channel["parameters"] = {"tenant": {"description": "the tenant, as in RECON_API_KEYS"}}
    return channel


def _operation(
    action: str, channel: str, messages: dict[str, dict[str, Any]], description: str
) -> dict[str, Any]:
    return {
        "action": action,
        "channel": {"$ref": f"#/channels/{channel}"},
        "description": description,
        "messages": [{"$ref": f"#/channels/{channel}/messages/{name}"} for name in messages],
    }


def asyncapi_document() -> dict[str, Any]:
    topics = Topics()
    models: list[type[BaseModel]] = [
        *COMMANDS,
        OperationObserved,
        Envelope,
        *EVENTS,
        *GOVERNANCE,
        DriftDetected,
        ChainCheckpoint,
        OmittedValue,
        SubmissionRequest,
        SubmissionAccepted,
        IntentRefused,
    ]
    _, defs = models_json_schema([(m, "serialization") for m in models], ref_template=SCHEMAS)
    # The intents door takes what POST /v1/transactions takes: the catalog's providers and
    # operations as enums, the default deployment's as in docs/openapi.json.
    with_catalog({"components": {"schemas": defs["$defs"]}}, catalog_of(load_settings()))
    commands = {c.__name__: _message(c.__name__, _ref(c), _doc(c), TX_KEY) for c in COMMANDS}
    observations = {
        "OperationObserved": _message(
            "OperationObserved", _ref(OperationObserved), "what someone saw at a provider", TX_KEY
        )
    }
    events = {e.__name__: _event_message(e) for e in EVENTS}
    drift = {
        "DriftDetected": _message(
            "DriftDetected",
            _ref(DriftDetected),
            "a disagreement between a provider's effects and recon's ledger",
            "the drift id (derived from what was found: one report per drift)",
        )
    }
    checkpoints = {
        "ChainCheckpoint": _message(
            "ChainCheckpoint",
            _ref(ChainCheckpoint),
            "the decider's Ed25519-signed statement of the chain heads it wrote",
            "none: the record is written to the partition of the events it signs",
        )
    }
    dead = {"DeadLetter": _dead_letter_message()}
    governance = {
        g.__name__: _message(g.__name__, _ref(g), _doc(g), "the tenant (one order per tenant)")
        for g in GOVERNANCE
    }
    intents = {
        "Intent": _message(
            "Intent",
            _ref(SubmissionRequest),
            "an agent's submission, the body of POST /v1/transactions",
            "`tenant/tx_id`, the tenant being the topic's",
        )
    }
    replies = {
        name: _message(name, _ref(model), summary, "the intent's tx_id")
        for name, model, summary in (
            ("IntentAccepted", SubmissionAccepted, "the HTTP 202 body for the same intent"),
            ("IntentRefused", IntentRefused, _doc(IntentRefused)),
        )
    }
    channels = {
        "commands": (
            topics.commands,
            "what the decider is asked to do (intake, saga orchestrator, pull reconciler)",
            commands,
        ),
        "observations": (
            topics.observations,
            "what provider calls, lookups and webhooks saw at a provider",
            observations,
        ),
        "events": (
            topics.events,
            "every state transition, hash-chained per transaction; written only by the "
            "decider, kept forever",
            events,
        ),
        "checkpoints": (
            topics.checkpoints,
            "signed chain heads, written by the decider in the same Kafka transaction as "
            "the events they sign; kept forever beside recon.events",
            checkpoints,
        ),
        "drift": (topics.drift, "drift reports of the scan and of webhooks", drift),
        "intents": (
            topics.intents("{tenant}"),
            "one topic per tenant, written only by that tenant's principal (a literal ACL), "
            "so the broker, never the record, says whose intent it is",
            intents,
        ),
        "intentReplies": (
            topics.intent_replies("{tenant}"),
            "the answer to every record of the tenant's intents topic",
            replies,
        ),
        "governance": (
            topics.governance,
            "policy, kill switch and breaker changes, each with who made it; the record of "
            "what is in force in Postgres",
            governance,
        ),
        "deadLetters": (
            topics.dead_letters,
            "records a consumer could not act on, with why and where they came from",
            dead,
        ),
    }
    senders = {
        "commands": "intake, saga orchestrator and pull reconciler",
        "observations": (
            "decider (its provider calls' answers, decided when written: header recon-decided),"
            " pull reconciler and intake (webhooks)"
        ),
        "events": "decider",
        "checkpoints": "decider",
        "drift": "pull reconciler and intake",
        "deadLetters": "any consumer that could not read its input",
        "intents": "agents of the tenant",
        "intentReplies": "Kafka intents process",
        "governance": "intake (policy, kill-switch and breaker routes)",
    }
    receivers = {
        "commands": "decider",
        "observations": "decider",
        "events": "projector, saga orchestrator, auditors",
        "checkpoints": "auditors (audit verify, audit bundle, the receipt route)",
        "drift": "projector",
        "deadLetters": "operators",
        "intents": "Kafka intents process",
        "intentReplies": "agents of the tenant",
        "governance": "auditors and operators",
    }
    operations: dict[str, Any] = {}
    for name, (_, _, messages) in channels.items():
        operations[f"send_{name}"] = _operation("send", name, messages, senders[name])
        operations[f"receive_{name}"] = _operation("receive", name, messages, receivers[name])
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "recon topics",
            "version": "1",
            "description": "The Kafka topics of recon (names shown without "
            "RECON_TOPIC_PREFIX). Every topic has the same partition count "
            "(RECON_KAFKA_PARTITIONS, chosen before a deployment's first start; the bindings "
            "show its default) and is keyed as its messages say; JSON values.",
        },
        "defaultContentType": "application/json",
        "servers": {
            "local": {
                "host": "127.0.0.1:9092",
                "protocol": "kafka",
                "description": "`make run` (RECON_KAFKA_BOOTSTRAP)",
            }
        },
        "channels": {
            name: _channel(address, description, messages)
            for name, (address, description, messages) in channels.items()
        },
        "operations": operations,
        "components": {
            "schemas": defs["$defs"],
            "messages": {
                **commands,
                **observations,
                **events,
                **checkpoints,
                **drift,
                **dead,
                **governance,
                **intents,
                **replies,
            },
        },
    }
