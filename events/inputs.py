"""What the decider consumes: commands (recon.commands) and observations
(recon.observations).

Commands are imperative; observations report what someone saw at a provider. Time
comes in on the message (`issued_at`, `observed_at`) so the decider never reads a clock.
"""

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from events.definition import OperationSpec
from events.model import Message


class SubmitTransaction(Message):
    type: Literal["SubmitTransaction"] = "SubmitTransaction"
    schema_version: Literal[1] = 1
    message_id: str
    tenant: str
    tx_id: str
    agent_id: str
    fingerprint: str
    operations: tuple[OperationSpec, ...]
    issued_at: datetime


class Outcome(StrEnum):
    """What an observer saw; classification of raw answers happens at the edge (the
    dispatcher's adapter), the decision of what it means happens in the decider."""

    SUCCEEDED = "succeeded"  # the provider holds the effect: a 2xx, or a lookup that found it
    REJECTED = "rejected"  # a definitive refusal: no effect and none will follow
    UNKNOWN = "unknown"  # timeout, reset, 5xx, pending: the effect may or may not exist
    ABSENT = "absent"  # a lookup proved there is no effect under the key
    UNAVAILABLE = "unavailable"  # a lookup could not answer
    KEY_CONFLICT = "key_conflict"  # the provider says the key was used for another payload


class Source(StrEnum):
    RESPONSE = "response"
    LOOKUP = "lookup"
    WEBHOOK = "webhook"


class OperationObserved(Message):
    type: Literal["OperationObserved"] = "OperationObserved"
    schema_version: Literal[1] = 1
    # Deterministic per observation (op_key, attempt, source, sequence at the observer)
    # so a re-sent observation is recognised as the same one.
    message_id: str
    tenant: str
    tx_id: str
    action: str
    op_key: str
    attempt: int  # the fencing token of the dispatch this observation belongs to
    source: Source
    outcome: Outcome
    status_code: int | None = None
    remote_id: str | None = None
    body: Any = None
    error: str | None = None
    observed_at: datetime


DeciderInput = Annotated[SubmitTransaction | OperationObserved, Field(discriminator="type")]
decider_input_adapter: TypeAdapter[DeciderInput] = TypeAdapter(DeciderInput)


def parse_input(raw: bytes) -> DeciderInput:
    return decider_input_adapter.validate_json(raw)
