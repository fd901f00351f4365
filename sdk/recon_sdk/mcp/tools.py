"""The tools. Each is a call of the SDK; a refusal becomes a tool error whose text starts with
the API's `error` code, so the model can act on it (`duplicate_intent`: follow the named
transaction; `not_found`: check the id).

Hints are honest: a host asks the user before a tool marked destructive. A transaction may
delete, so submitting is two tools by the catalog's side-effect class: `submit_transaction`
takes read and write operations only (refusing a destructive one by name, checked against
`GET /v1/catalog`), and `submit_destructive_transaction`, marked destructive, takes any.
"""

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from recon_sdk import AsyncRecon, Conflict, Owner, ReconError
from recon_sdk.mcp.catalog_tools import split_by_class, transaction_model
from recon_sdk.mcp.config import McpSettings
from recon_sdk.mcp.models import (
    TX_ID_PATTERN,
    McpTransaction,
    OperationList,
    Outcome,
    ReviewList,
    Submitted,
    advice,
)
from recon_sdk.models import SETTLED, AbortRequested, CatalogEntry, Transaction

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

TxId = Annotated[str, Field(pattern=TX_ID_PATTERN, description="the transaction's tx_id")]
Reason = Annotated[str, Field(min_length=1, max_length=1000)]
WaitSeconds = Annotated[int, Field(ge=1, le=120, description="how long to wait, at most")]

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def build_server(settings: McpSettings, catalog: list[CatalogEntry]) -> MCPServer[Any]:
    """The server, its submit tools' inputs generated from `catalog` (`GET /v1/catalog`)."""
    safe, _ = split_by_class(catalog)
    # Read and write operations only: a destructive step is refused by the schema, naming
    # the tool that takes it (which a host confirms with the user).
    safe_transaction = transaction_model(
        "SafeTransaction",
        safe,
        "not an operation of submit_transaction: a destructive one goes through "
        "submit_destructive_transaction; list_operations shows every operation and its class",
    )
    # Every operation: a destructive transaction may also reserve, and its notifications
    # (on_commit) are writes; the tool is marked destructive as a whole.
    any_transaction = transaction_model(
        "Transaction", catalog, "not an operation of the catalog: see list_operations"
    )
    server: MCPServer[Any] = MCPServer(
        "recon",
        instructions=(
            "recon runs an agent's side effects (reserve, charge, email, delete) at most "
            "once, as a transaction. list_operations shows what exists and each payload; "
            "submit (leave tx_id out: the server derives it), then wait_for_transaction. "
            "Give a step that pays or ships for a business object its natural_key (the "
            "order id): recon then refuses a second submission of the same intent. Never "
            "resubmit under a new tx_id to retry; awaiting_approval and manual_review mean "
            "a person decides: tell the user."
        ),
    )
    # The sessions this server's submissions own, by tx_id: its aborts name and prove them.
    owners: dict[str, Owner] = {}

    async def call(use: Callable[[AsyncRecon], Awaitable[T]]) -> T:
        async with AsyncRecon(settings.intake_url, api_key=settings.api_key) as recon:
            try:
                return await use(recon)
            except ReconError as exc:
                raise ToolError(_refusal(exc)) from exc

    async def submit(transaction: McpTransaction) -> Submitted:
        body = transaction.body(settings.agent_id, settings.session_id, settings.task_id)
        accepted = await call(lambda recon: recon.submit(body))
        if accepted.owner is not None:
            owners[accepted.tx_id] = accepted.owner
        return Submitted(
            tx_id=accepted.tx_id, status=accepted.status, operations=accepted.operations
        )

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False,
            destructive_hint=False,
            # The same transaction again is the same intent: nothing new happens.
            idempotent_hint=True,
            open_world_hint=True,
        )
    )
    @_takes(safe_transaction)
    async def submit_transaction(transaction: McpTransaction) -> Submitted:
        """Submit a transaction of read and write operations (a destructive one, such as a
        delete, goes through submit_destructive_transaction): `steps` run in order, each
        with the `compensation` that undoes it if a later step fails; `on_commit`
        notifications run after commit. Answers the tx_id and operation keys."""
        return await submit(transaction)

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=True
        )
    )
    @_takes(any_transaction)
    async def submit_destructive_transaction(transaction: McpTransaction) -> Submitted:
        """Submit a transaction that may destroy data (a delete, a waitlist promotion that
        displaces someone), with any other operations it needs: the same as
        submit_transaction, marked destructive so the user is asked first. recon still
        requires an operator's approval where policy says so."""
        return await submit(transaction)

    @server.tool(annotations=READ_ONLY)
    async def get_transaction(tx_id: TxId) -> Transaction:
        """The transaction's status and each operation's state and evidence, now."""
        return await call(lambda recon: recon.get(tx_id))

    @server.tool(annotations=READ_ONLY)
    async def wait_for_transaction(tx_id: TxId, timeout_s: WaitSeconds = 30) -> Outcome:
        """Wait (at most timeout_s) until the transaction ended or needs a person. An
        outcome still running after the wait is recon's to settle (lookups, webhooks,
        reviews), never the model's: wait again, do not resubmit."""
        deadline = time.monotonic() + timeout_s
        tx = await call(lambda recon: recon.get(tx_id))
        while tx.status not in SETTLED and time.monotonic() < deadline:
            await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            tx = await call(lambda recon: recon.get(tx_id))
        settled = tx.status in SETTLED
        return Outcome(
            transaction=tx,
            settled=settled,
            needs_person=tx.needs_person,
            advice=advice(tx, settled),
        )

    @server.tool(annotations=READ_ONLY)
    async def list_operations() -> OperationList:
        """Every operation recon offers: provider, name, class (read, write, destructive),
        reversibility, the compensation it allows, and its payload's JSON Schema where the
        provider declares one."""
        entries: list[CatalogEntry] = await call(lambda recon: recon.catalog())
        return OperationList(operations=entries)

    @server.tool(annotations=READ_ONLY)
    @_takes(any_transaction)
    async def preview(transaction: McpTransaction) -> dict[str, Any]:
        """What the transaction would do, computed by the providers, without doing it (each
        step's effects, reversibility and whether it needs approval)."""
        body = transaction.body(settings.agent_id, settings.session_id, settings.task_id)
        return await call(lambda recon: recon.preview(body))

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=True
        )
    )
    async def abort_transaction(
        tx_id: TxId, reason: Reason = "aborted by request"
    ) -> AbortRequested:
        """Abort before commit: no further step is dispatched and confirmed steps are
        undone. After commit the answer is `already_committed`; after another session
        claimed the transaction, `fenced`."""
        owner = owners.get(tx_id)
        return await call(lambda recon: recon.abort(tx_id, reason=reason, owner=owner))

    @server.tool(annotations=READ_ONLY)
    async def list_reviews(
        state: Annotated[str | None, Field(pattern="^(open|resolved)$")] = "open",
        older_than_s: Annotated[int | None, Field(ge=0, le=3153600000)] = None,
    ) -> ReviewList:
        """Operations waiting for a person (manual review), e.g. an unknown outcome no
        lookup could settle."""
        reviews = await call(lambda recon: recon.reviews(state=state, older_than_s=older_than_s))
        return ReviewList(reviews=reviews)

    return server


def _takes(model: type[McpTransaction]) -> Callable[[F], F]:
    """The tool's `transaction` argument is `model` (generated from the catalog at start):
    the MCP library builds the input schema and validates the arguments from the
    signature, and a type made at run time cannot be written in it."""

    def set_input(fn: F) -> F:
        fn.__annotations__["transaction"] = model
        return fn

    return set_input


def _refusal(exc: ReconError) -> str:
    text = f"{exc.code}: {exc.message}"
    if isinstance(exc, Conflict) and exc.duplicate_of is not None:
        text += f" duplicate_of={json.dumps(exc.duplicate_of, sort_keys=True)}"
    return text
