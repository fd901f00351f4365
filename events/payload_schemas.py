"""Pure: the shape of each catalog operation's payload, checked at the door.

What a quota counts and what a provider is sent must be the same value: an `"amount":
"4999999"` that a quota read as 0 while the provider charged it would walk past every
`max_amount`. So each operation declares its fields' types and bounds (strict: a string or a
float is not an integer amount), the fields it cannot do without are required, and a
payload that does not fit is refused before anything is recorded, naming the field.

Fields a schema does not name are let through (a provider may take more than recon reads),
within the body's size limit; the ones recon or a quota reads are the ones typed here.
"""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

# Minor units; 2**53 keeps an amount exact in every JSON reader on the way.
Amount = Annotated[StrictInt, Field(ge=1, le=2**53)]
Quantity = Annotated[StrictInt, Field(ge=1, le=1_000_000)]
Currency = Annotated[StrictStr, Field(pattern=r"^[a-z]{3}$")]
Name = Annotated[StrictStr, Field(min_length=1, max_length=256)]
Address = Annotated[StrictStr, Field(min_length=3, max_length=320)]


class _Payload(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class ChargePayload(_Payload):
    amount: Amount
    currency: Currency | None = None
    customer: Name | None = None


class RefundPayload(_Payload):
    amount: Amount | None = None
    currency: Currency | None = None
    charge: Name | None = None


class ReservePayload(_Payload):
    sku: Name
    qty: Quantity | None = None


class ReleasePayload(_Payload):
    sku: Name | None = None
    qty: Quantity | None = None


class EmailPayload(_Payload):
    to: Address | None = None
    template: Name | None = None


class PromotePayload(_Payload):
    resource: Name | None = None
    user: Name | None = None


class RestorePayload(_Payload):
    resource: Name | None = None


class DeletePayload(_Payload):
    resource: Name | None = None


PAYLOAD_SCHEMAS: dict[str, type[_Payload]] = {
    "payments.charge": ChargePayload,
    "payments.refund": RefundPayload,
    "inventory.reserve": ReservePayload,
    "inventory.release": ReleasePayload,
    "email.send": EmailPayload,
    "waitlist.promote": PromotePayload,
    "waitlist.restore": RestorePayload,
    "records.delete": DeletePayload,
}


def payload_problem(operation: str, payload: dict[str, Any]) -> str | None:
    """None when `payload` fits `operation`'s schema, else what is wrong, field first."""
    schema = PAYLOAD_SCHEMAS.get(operation)
    if schema is None:
        return f"{operation!r} has no payload schema; it is not a catalog operation"
    try:
        schema.model_validate(payload)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "payload"
        return f"payload.{field}: {first['msg']}"
    return None
