"""Typed builders of a transaction's operations.

`step` builds any operation; the named helpers build the operations of recon's catalog
(and the sandbox provider's payloads) with their usual compensation, so an agent writes
`ops.charge(1299, "usd", "cus_1")` instead of a dict it could misspell.
"""

from collections.abc import Iterable
from typing import Any

from recon_sdk.models import Compensation, Operation, TransactionRequest

DEFAULT_PROVIDER = "sandbox"


def step(
    action: str,
    operation: str,
    payload: dict[str, Any],
    *,
    provider: str = DEFAULT_PROVIDER,
    compensation: str | None = None,
    compensation_payload: dict[str, Any] | None = None,
    natural_key: str | None = None,
    resource: str | None = None,
    expected_revision: int | None = None,
) -> Operation:
    """Any operation; `compensation` names its compensating operation (None: irreversible,
    so it may only be the last step, or a notification): the one its operation declares in
    recon's catalog. recon derives the compensation's payload itself and refuses a
    `compensation_payload` (`compensation_payload_not_allowed`); the parameter stays for
    older servers. `natural_key`: the business identity of the effect (an order id); another
    tx_id naming it is refused `duplicate_intent`."""
    return Operation(
        action=action,
        provider=provider,
        operation=operation,
        payload=payload,
        compensation=(
            None
            if compensation is None
            else Compensation(operation=compensation, payload=compensation_payload)
        ),
        natural_key=natural_key,
        resource=resource,
        expected_revision=expected_revision,
    )


def reserve(
    sku: str, qty: int = 1, *, action: str = "reserve", provider: str = DEFAULT_PROVIDER
) -> Operation:
    """`inventory.reserve`, undone by `inventory.release`."""
    return step(
        action,
        "inventory.reserve",
        {"sku": sku, "qty": qty},
        provider=provider,
        compensation="inventory.release",
    )


def charge(
    amount: int,
    currency: str,
    customer: str,
    *,
    action: str = "charge",
    provider: str = DEFAULT_PROVIDER,
    natural_key: str | None = None,
) -> Operation:
    """`payments.charge` of `amount` minor units, undone by `payments.refund`;
    `natural_key`: the order (or invoice) it pays, so a re-planned charge is refused."""
    return step(
        action,
        "payments.charge",
        {"amount": amount, "currency": currency, "customer": customer},
        provider=provider,
        compensation="payments.refund",
        natural_key=natural_key,
    )


def send_email(
    to: str, template: str, *, action: str = "email", provider: str = DEFAULT_PROVIDER
) -> Operation:
    """`email.send`: irreversible, so a notification (`on_commit`) or the last step."""
    return step(action, "email.send", {"to": to, "template": template}, provider=provider)


def transaction(
    tx_id: str,
    agent_id: str,
    steps: Iterable[Operation],
    *,
    on_commit: Iterable[Operation] = (),
    on_compensated: Iterable[Operation] = (),
    session_id: str | None = None,
    task_id: str | None = None,
) -> TransactionRequest:
    return TransactionRequest(
        tx_id=tx_id,
        agent_id=agent_id,
        steps=tuple(steps),
        on_commit=tuple(on_commit),
        on_compensated=tuple(on_compensated),
        session_id=session_id,
        task_id=task_id,
    )
