"""The tools. Each one is a call of the Python SDK; a refusal becomes a tool error whose
text starts with the API's `error` code, so the model can act on it (a `tx_conflict`
means: pick another tx_id; `not_found`: check the id)."""

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field
from recon_sdk import AsyncRecon, NotFound, Owner, ReconError

from events.definition import TX_ID_PATTERN, ReviewState
from services.intake.abort import AbortRequest
from services.intake.submission import SubmissionRequest
from services.mcp.config import McpSettings

T = TypeVar("T")

TxId = Annotated[str, Field(pattern=TX_ID_PATTERN, description="the transaction's business id")]
# The abort's fields, with the intake's own bounds and defaults.
Reason = Annotated[str, AbortRequest.model_fields["reason"]]
Actor = Annotated[str, AbortRequest.model_fields["actor"]]

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
PREVIEW_UNAVAILABLE = "previews are not available on this recon deployment yet"


def build_server(settings: McpSettings) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(
        "recon",
        instructions=(
            "recon runs an agent's side effects (reserve, charge, email) exactly once, as a "
            "transaction: submit it, then read it until its status is committed, failed, "
            "compensated or manual_review. Resubmitting the same tx_id with the same body "
            "is safe and returns the same operation keys."
        ),
    )

    # The sessions this server's submissions own, by tx_id: its aborts name and prove
    # them (recon refuses an agent's abort without its session's owner token).
    owners: dict[str, Owner] = {}

    def _as_configured_agent(body: dict[str, Any]) -> dict[str, Any]:
        # The model does not choose who it is: the deployment does.
        return body if settings.agent_id is None else {**body, "agent_id": settings.agent_id}

    async def call(use: Callable[[AsyncRecon], Awaitable[T]]) -> T:
        async with AsyncRecon(settings.intake_url, api_key=settings.api_key) as recon:
            try:
                return await use(recon)
            except ReconError as exc:
                raise ToolError(f"{exc.code}: {exc.message}") from exc

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False,
            destructive_hint=False,
            # The same tx_id and body is the same intent: nothing new happens.
            idempotent_hint=True,
            open_world_hint=True,
        )
    )
    async def submit_transaction(transaction: SubmissionRequest) -> dict[str, Any]:
        """Submit a transaction: `steps` run in order (each with a `compensation` that
        undoes it if a later step fails), `on_commit` notifications run after commit.
        Answers the operation keys; read it with get_transaction."""
        body = _as_configured_agent(transaction.model_dump(mode="json", exclude_defaults=True))
        accepted = await call(lambda recon: recon.submit(body))
        if accepted.owner is not None:
            owners[accepted.tx_id] = accepted.owner
        return accepted.model_dump(mode="json")

    @server.tool(annotations=READ_ONLY)
    async def get_transaction(tx_id: TxId) -> dict[str, Any]:
        """The transaction's status (accepted, running, committed, compensating,
        compensated, failed, manual_review) and each operation's state and evidence."""
        tx = await call(lambda recon: recon.get(tx_id))
        return tx.model_dump(mode="json")

    @server.tool(annotations=READ_ONLY)
    async def preview(transaction: SubmissionRequest) -> dict[str, Any]:
        """What the transaction would do, computed by the providers, without doing it
        (each step's effects, reversibility and whether it needs approval)."""
        body = _as_configured_agent(transaction.model_dump(mode="json", exclude_defaults=True))
        async with AsyncRecon(settings.intake_url, api_key=settings.api_key) as recon:
            try:
                return await recon.preview(body)
            except NotFound as exc:
                if exc.code == "http_404":  # the route itself is missing, not a resource
                    return {"available": False, "message": PREVIEW_UNAVAILABLE}
                raise ToolError(f"{exc.code}: {exc.message}") from exc
            except ReconError as exc:
                raise ToolError(f"{exc.code}: {exc.message}") from exc

    @server.tool(
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True
        )
    )
    async def abort_transaction(
        tx_id: TxId,
        reason: Reason = "aborted by request",
        actor: Actor = "agent",
        owner: Owner | None = None,
    ) -> dict[str, Any]:
        """Abort before commit: no further step is dispatched and confirmed steps are
        undone. After commit the answer is `already_committed`. `owner`: the `owner` of
        the submission's answer; by default the one this server's submission returned.
        After another session claimed the transaction the answer is `fenced`."""
        chosen = owner or owners.get(tx_id)
        requested = await call(
            lambda recon: recon.abort(tx_id, reason=reason, actor=actor, owner=chosen)
        )
        return requested.model_dump(mode="json")

    @server.tool(annotations=READ_ONLY)
    async def list_reviews(
        state: ReviewState | None = ReviewState.OPEN,
        older_than_s: Annotated[int | None, Field(ge=0, le=3153600000)] = None,
    ) -> dict[str, Any]:
        """Operations waiting for a person (manual review), e.g. an unknown outcome no
        lookup could settle."""
        reviews = await call(lambda recon: recon.reviews(state=state, older_than_s=older_than_s))
        return {"reviews": [r.model_dump(mode="json", exclude_none=True) for r in reviews]}

    return server
