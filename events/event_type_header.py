"""The `type` header of a recon.events record: the envelope's `type`, repeated outside the
JSON so that a consumer acting on a few event types (the saga orchestrator on three, the
dispatcher on one) passes over the others without parsing them.

Additive: records written before it carry no such header, and a consumer that finds none
decodes the record as it always did. The envelope stays the authority: a consumer that
acts on a record decodes it and reads the type from the envelope. A record passed over is
not judged by that consumer: the projector, which decodes every event, still dead-letters
an unreadable one. docs/asyncapi.json describes the header on every recon.events message.
"""

from collections.abc import Collection, Sequence

EVENT_TYPE = "type"


def event_type_header(event_type: str) -> tuple[str, bytes]:
    return (EVENT_TYPE, event_type.encode())


def event_type_of(headers: Sequence[tuple[str, bytes]] | None) -> str | None:
    """The type the record's header names, or None when it has none (an older record)."""
    for name, value in headers or ():
        if name == EVENT_TYPE:
            return value.decode("utf-8", "replace")
    return None


def passed_over(headers: Sequence[tuple[str, bytes]] | None, acts_on: Collection[str]) -> bool:
    """Whether a consumer acting on `acts_on` may skip the record unparsed: its header names
    another type. A record without the header is never passed over: it is decoded."""
    named = event_type_of(headers)
    return named is not None and named not in acts_on
