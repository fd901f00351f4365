"""recon_sdk: a typed Python client (blocking and asyncio) for the recon intake API.

from recon_sdk import Recon, ops
with Recon("http://127.0.0.1:8080", api_key="demo-key") as recon:
    tx = ops.transaction("order-43", "agent-7", [ops.reserve("sku-1")])
    recon.submit(tx)
    print(recon.wait("order-43").status)  # committed
"""

from recon_sdk import ops
from recon_sdk.client import AsyncRecon, Recon
from recon_sdk.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    ReconError,
    Unauthorized,
    Unavailable,
    WaitTimeout,
)
from recon_sdk.models import (
    NEEDS_PERSON,
    SETTLED,
    TERMINAL,
    AbortRequested,
    Accepted,
    CatalogEntry,
    Claimed,
    Compensation,
    Event,
    KillSwitch,
    Operation,
    Owner,
    Review,
    ReviewResolving,
    Transaction,
    TransactionPage,
    TransactionRequest,
    TransactionSummary,
)
from recon_sdk.tx_ids import stable_tx_id

__all__ = [
    "NEEDS_PERSON",
    "SETTLED",
    "TERMINAL",
    "AbortRequested",
    "Accepted",
    "AsyncRecon",
    "CatalogEntry",
    "Claimed",
    "Compensation",
    "Conflict",
    "Event",
    "Forbidden",
    "InvalidRequest",
    "KillSwitch",
    "NotFound",
    "Operation",
    "Owner",
    "PayloadTooLarge",
    "Recon",
    "ReconError",
    "Review",
    "ReviewResolving",
    "Transaction",
    "TransactionPage",
    "TransactionRequest",
    "TransactionSummary",
    "Unauthorized",
    "Unavailable",
    "WaitTimeout",
    "ops",
    "stable_tx_id",
]
