"""The submit tools' input schemas, generated from `GET /v1/catalog` read when the server
starts: a step is one of the catalog's operations (a `oneOf` with one branch per operation,
its `provider` and `operation` fixed and its `payload` described by the provider's declared
schema), so a model sees what exists and what each payload takes before it calls, and a host
shows it. Each tool lists only the operations of its side-effect class: the split between
`submit_transaction` and the destructive tool (which a host confirms with the user) is the
schema itself, judged when the arguments are validated, before any call to the intake.

The payload is not validated here: the intake judges it against the same schema (`422
invalid_payload` naming the field), and one judge per rule keeps the two from drifting.
"""

import re
from collections.abc import Iterable
from typing import Annotated, Any, Literal, Union, cast

from pydantic import Discriminator, Field, Tag, WithJsonSchema, create_model

from recon_sdk.mcp.models import McpTransaction
from recon_sdk.models import CatalogEntry, Operation

DESTRUCTIVE = "destructive"
ANY_PAYLOAD: dict[str, Any] = {"type": "object"}


def split_by_class(
    entries: Iterable[CatalogEntry],
) -> tuple[list[CatalogEntry], list[CatalogEntry]]:
    """(read and write operations, destructive operations)."""
    entries = list(entries)
    return (
        [e for e in entries if e.class_ != DESTRUCTIVE],
        [e for e in entries if e.class_ == DESTRUCTIVE],
    )


def transaction_model(name: str, entries: list[CatalogEntry], refusal: str) -> type[McpTransaction]:
    """A McpTransaction whose steps and notifications are among `entries` only; `refusal`
    is what a model that names another operation reads (where that operation goes)."""
    if not entries:
        raise ValueError(f"{name}: no operation of the catalog fits this tool")
    variants = [_step_model(e) for e in entries]
    step: Any
    if len(variants) == 1:
        step = variants[0]
    else:
        tagged = tuple(
            Annotated[v, Tag(_tag_of(e))] for v, e in zip(variants, entries, strict=True)
        )
        # A union built at run time: `X | Y` needs the members written out.
        step = Annotated[
            Union[tagged],  # noqa: UP007
            Discriminator(
                _step_tag,
                custom_error_type="operation_not_offered",
                custom_error_message=refusal,
            ),
        ]
    model: type[McpTransaction] = create_model(
        name,
        __base__=McpTransaction,
        __doc__=McpTransaction.__doc__,
        steps=(tuple[step, ...], Field(min_length=1)),
        on_commit=(tuple[step, ...], ()),
        on_compensated=(tuple[step, ...], ()),
    )
    return model


def _step_model(entry: CatalogEntry) -> type[Operation]:
    payload = entry.payload_schema or ANY_PAYLOAD
    described = f"{entry.provider} {entry.operation}: {entry.class_}, {entry.reversibility}"
    if entry.compensation:
        described += f", undone by {entry.compensation}"
    model: type[Operation] = create_model(
        _model_name(entry),
        __base__=Operation,
        __doc__=described,
        # Literals of values read at run time (the JSON Schema's `const`).
        provider=(_const(entry.provider), ...),
        operation=(_const(entry.operation), ...),
        # The schema the model reads; the intake validates against it (see module doc).
        payload=(Annotated[dict[str, Any], WithJsonSchema(payload)], ...),
    )
    return model


def _const(value: str) -> Any:
    return cast(Any, Literal)[value]


def _tag_of(entry: CatalogEntry) -> str:
    return f"{entry.provider}/{entry.operation}"


def _step_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        provider, operation = value.get("provider"), value.get("operation")
    else:
        provider = getattr(value, "provider", None)
        operation = getattr(value, "operation", None)
    return f"{provider}/{operation}"


def _model_name(entry: CatalogEntry) -> str:
    # The JSON Schema's $defs key: readable, and distinct per provider and operation.
    return re.sub(r"[^A-Za-z0-9_]", "_", f"step_{entry.provider}__{entry.operation}")
