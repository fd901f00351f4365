"""The operations the sandbox provider offers (docs/contract.md, "Sandbox provider"),
declared as any provider declares its own (ProviderAdapter.operations): the class and
reversibility recon's rules read, the one undo each allows, the payload's JSON Schema
checked at the door, and the field quotas count as the amount.

Pure: no I/O.

The schemas are what the sandbox reads (services.devtools.sandbox): what a quota counts and
what the provider is sent must be the same value, so an amount is a JSON integer (a string
or a float is refused, not read as 0 by a quota while the provider charges it) within the
bounds every JSON reader on the way keeps exact. A payload with a field the sandbox does not
read is refused (`additionalProperties: false`) where the sandbox stores nothing else; a
charge and an email keep taking fields recon does not read (a description, a locale), which
the sandbox records with the effect.
"""

from typing import Any

from events.catalog import OperationInfo, Reversibility, SideEffect

# Minor units; 2**53 keeps an amount exact in every JSON reader on the way.
_AMOUNT = {"type": "integer", "minimum": 1, "maximum": 2**53}
_QUANTITY = {"type": "integer", "minimum": 1, "maximum": 1_000_000}
_CURRENCY = {"type": "string", "pattern": "^[a-z]{3}$"}
_NAME = {"type": "string", "minLength": 1, "maxLength": 256}
_ADDRESS = {"type": "string", "minLength": 3, "maxLength": 320}
_REVISION = {"type": "integer", "minimum": 0, "maximum": 2**53}


def _object(
    properties: dict[str, Any], *, required: tuple[str, ...] = (), closed: bool = True
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    return schema


# A step's `resource` and `expected_revision` travel in the payload (the intake adds them);
# an agent may also name them there directly.
_REVISIONED = {"resource": _NAME, "expected_revision": _REVISION}

SANDBOX_OPERATIONS: dict[str, OperationInfo] = {
    info.name: info
    for info in (
        OperationInfo(
            "payments.charge",
            SideEffect.WRITE,
            Reversibility.COMPENSATING_ONLY,
            compensation="payments.refund",
            payload_schema=_object(
                {"amount": _AMOUNT, "currency": _CURRENCY, "customer": _NAME},
                required=("amount",),
                closed=False,
            ),
            amount_field="amount",
        ),
        OperationInfo(
            "payments.refund",
            SideEffect.WRITE,
            Reversibility.IRREVERSIBLE,
            payload_schema=_object({"amount": _AMOUNT, "currency": _CURRENCY, "charge": _NAME}),
            amount_field="amount",
        ),
        OperationInfo(
            "inventory.reserve",
            SideEffect.WRITE,
            Reversibility.REVERSIBLE,
            compensation="inventory.release",
            payload_schema=_object({"sku": _NAME, "qty": _QUANTITY}, required=("sku",)),
        ),
        OperationInfo(
            "inventory.release",
            SideEffect.WRITE,
            Reversibility.REVERSIBLE,
            payload_schema=_object({"sku": _NAME, "qty": _QUANTITY}),
        ),
        OperationInfo(
            "email.send",
            SideEffect.WRITE,
            Reversibility.IRREVERSIBLE,
            payload_schema=_object({"to": _ADDRESS, "template": _NAME}, closed=False),
        ),
        # Moves a user up a class waitlist, displacing (and notifying) the one ahead: its
        # compensation puts the positions back, but the displaced user was told (seed 003).
        OperationInfo(
            "waitlist.promote",
            SideEffect.DESTRUCTIVE,
            Reversibility.COMPENSATING_ONLY,
            compensation="waitlist.restore",
            payload_schema=_object({**_REVISIONED, "user": _NAME}),
        ),
        OperationInfo(
            "waitlist.restore",
            SideEffect.WRITE,
            Reversibility.COMPENSATING_ONLY,
            payload_schema=_object(_REVISIONED),
        ),
        OperationInfo(
            "records.delete",
            SideEffect.DESTRUCTIVE,
            Reversibility.IRREVERSIBLE,
            payload_schema=_object(_REVISIONED),
        ),
    )
}
