"""The clients: `AsyncRecon` (asyncio) and `Recon` (blocking), one method per API call.

Both send what `recon_sdk.calls` describes and read answers into `recon_sdk.models`; a
refusal raises the `recon_sdk.errors` exception carrying the API's `error` code. Only
idempotent calls (reads and submissions) are resent after a 503 or a lost connection.
"""

import asyncio
import os
import time
from collections.abc import Collection, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Self

import httpx

from recon_sdk import calls
from recon_sdk.errors import NotFound, ReconError, Unavailable, WaitTimeout
from recon_sdk.models import (
    SETTLED,
    AbortRequested,
    Accepted,
    CatalogEntry,
    Claimed,
    Event,
    KillSwitch,
    Owner,
    Resolution,
    Review,
    ReviewResolving,
    Transaction,
    TransactionPage,
    TransactionRequest,
)

DEFAULT_URL = "http://127.0.0.1:8080"
Submission = TransactionRequest | Mapping[str, Any]


def _settings(base_url: str | None, api_key: str | None) -> tuple[str, dict[str, str]]:
    url = base_url or os.environ.get("RECON_URL") or DEFAULT_URL
    key = api_key or os.environ.get("RECON_API_KEY")
    if not key:
        raise ValueError("an API key is needed: pass api_key= or set RECON_API_KEY")
    return url.rstrip("/"), {"Authorization": f"Bearer {key}"}


def _filters(
    status: str | None,
    agent_id: str | None,
    provider: str | None,
    operation: str | None,
    created_after: datetime | None,
    created_before: datetime | None,
) -> dict[str, Any]:
    return {
        "status": status,
        "agent_id": agent_id,
        "provider": provider,
        "operation": operation,
        "created_after": created_after.isoformat() if created_after else None,
        "created_before": created_before.isoformat() if created_before else None,
    }


def _owner_of(
    tx_id: str, owner: Owner | None, owners: Mapping[str, Owner]
) -> Owner | Mapping[str, str]:
    chosen = owner or owners.get(tx_id)
    if chosen is None:
        raise ValueError(
            f"no session owns {tx_id!r} in this client: pass owner= (the submission's owner)"
        )
    return chosen


def _unreachable(call: calls.Call, exc: Exception, trace_id: str) -> Unavailable:
    return Unavailable(0, "unreachable", f"{call.method} {call.path}: {exc!r}", trace_id=trace_id)


class AsyncRecon:
    """`async with AsyncRecon(api_key="demo-key") as recon: await recon.submit(...)`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        url, headers = _settings(base_url, api_key)
        self._http = http or httpx.AsyncClient(timeout=timeout)
        self._url, self._headers, self._retries = url, headers, retries
        # The sessions this client's submissions own, by tx_id: its aborts carry them.
        self._owners: dict[str, Owner] = {}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _send(self, call: calls.Call) -> Any:
        header, trace_id = calls.traceparent()
        headers = {**self._headers, "traceparent": header}
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    call.method,
                    self._url + call.path,
                    json=call.json,
                    params=call.params,
                    headers=headers,
                )
                return calls.answer(
                    response.status_code, response.content, response.headers, trace_id
                )
            except httpx.TransportError as exc:
                error: ReconError = _unreachable(call, exc, trace_id)
                if not call.idempotent or attempt >= self._retries:
                    raise error from exc
            except Unavailable as exc:
                error = exc
                if not call.idempotent or attempt >= self._retries:
                    raise
            await asyncio.sleep(calls.backoff(attempt, error))
            attempt += 1

    async def submit(self, tx: Submission) -> Accepted:
        """Submit a transaction; safe to repeat (the same tx_id and body is one intent)."""
        accepted = Accepted.model_validate(await self._send(calls.submit(tx)))
        if accepted.owner is not None:
            self._owners[accepted.tx_id] = accepted.owner
        return accepted

    async def get(self, tx_id: str) -> Transaction:
        return Transaction.model_validate(await self._send(calls.get_transaction(tx_id)))

    async def events(self, tx_id: str) -> list[Event]:
        """Every event of the transaction, in `seq` order (all pages read)."""
        return [Event.model_validate(e) for e in await self._all("events", calls.get_events, tx_id)]

    async def _all(self, field: str, call: Any, *args: Any) -> list[Any]:
        """Every row of a paged list: `call(*args, cursor)` page after page, each page's
        rows under `field`."""
        rows: list[Any] = []
        cursor: str | None = None
        while True:
            body = await self._send(call(*args, cursor))
            rows += body[field]
            cursor = calls.next_page(body)
            if cursor is None:
                return rows

    async def transactions(
        self,
        *,
        status: str | None = None,
        agent_id: str | None = None,
        provider: str | None = None,
        operation: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> TransactionPage:
        """`GET /v1/transactions`: one page, newest first, of the transactions matching
        every filter given."""
        found = _filters(status, agent_id, provider, operation, created_after, created_before)
        body = await self._send(calls.list_transactions(found, limit, cursor))
        return TransactionPage.model_validate(body)

    async def drift(self) -> list[dict[str, Any]]:
        """`GET /v1/drift`, every page."""
        return await self._all("drift", calls.list_drift)

    async def wait(
        self,
        tx_id: str,
        *,
        timeout: float = 60.0,
        until: Collection[str] = SETTLED,
        poll_s: float = 0.25,
    ) -> Transaction:
        """The transaction once its status is in `until` (by default: committed, failed,
        compensated, or needing a person: awaiting_approval or manual_review, which waiting
        longer cannot change; `Transaction.needs_person` tells them apart from an outcome);
        `WaitTimeout` after `timeout` seconds. A 404 while
        waiting is the projection not having caught up with a fresh submission yet, and
        an unreachable intake may be restarting: both are polled through until the end."""
        deadline = time.monotonic() + timeout
        last: Transaction | None = None
        while True:
            try:
                last = await self.get(tx_id)
                if last.status in until:
                    return last
            except (NotFound, Unavailable):
                pass  # not projected yet, or the intake restarting: keep polling
            if time.monotonic() >= deadline:
                raise WaitTimeout(tx_id, timeout, last)
            await asyncio.sleep(poll_s)

    async def run(self, tx: TransactionRequest, *, timeout: float = 60.0) -> Transaction:
        """Submit and wait for the outcome."""
        await self.submit(tx)
        return await self.wait(tx.tx_id, timeout=timeout)

    async def abort(
        self,
        tx_id: str,
        *,
        reason: str | None = None,
        actor: str | None = None,
        owner: Owner | None = None,
    ) -> AbortRequested:
        """`owner`: the session to abort as; by default the one this client's submission
        of `tx_id` returned (an operator key needs none)."""
        chosen = owner or self._owners.get(tx_id)
        body = await self._send(calls.abort(tx_id, reason, actor, chosen))
        return AbortRequested.model_validate(body)

    async def reviews(
        self, *, state: str | None = None, older_than_s: int | None = None
    ) -> list[Review]:
        rows = await self._all("reviews", calls.list_reviews, state, older_than_s)
        return [Review.model_validate(r) for r in rows]

    async def review(self, review_id: str) -> Review:
        return Review.model_validate(await self._send(calls.get_review(review_id)))

    async def resolve(
        self, review_id: str, resolution: Resolution, *, note: str, actor: str | None = None
    ) -> ReviewResolving:
        body = await self._send(calls.resolve_review(review_id, resolution, note, actor))
        return ReviewResolving.model_validate(body)

    # Routes of docs/contract.md's "v1 additions" still being built: untyped until they land.
    async def receipt(self, tx_id: str) -> dict[str, Any]:
        """`GET /v1/transactions/{tx_id}/receipt`: the transaction's evidence bundle (events,
        provider evidence, the signed checkpoint covering them) for an auditor to verify,
        e.g. with `audit verify-bundle` or verifier-go, without recon."""
        return dict(await self._send(calls.get_receipt(tx_id)))

    async def operation(self, op_key: str) -> dict[str, Any]:
        """`GET /v1/operations/{op_key}`."""
        return dict(await self._send(calls.get_operation(op_key)))

    async def preview(self, tx: Submission) -> dict[str, Any]:
        """`POST /v1/previews`: each step's effect computed by its provider, nothing applied."""
        return dict(await self._send(calls.preview(tx)))

    async def approve(
        self, tx_id: str, action: str, digest: str, *, expires_in_s: int | None = None
    ) -> dict[str, Any]:
        """`POST /v1/approvals`, with an operator key."""
        return dict(await self._send(calls.approve(tx_id, action, digest, expires_in_s)))

    async def reject_approval(self, approval_id: str) -> dict[str, Any]:
        """`POST /v1/approvals/{id}/reject`."""
        return dict(await self._send(calls.reject_approval(approval_id)))

    # Sessions (README, "Succession"): `owner` names the session and, for an agent key,
    # proves it with its token.
    async def claim(self, tx_id: str, owner: Owner | Mapping[str, str]) -> Claimed:
        """`POST /v1/transactions/{tx_id}/claim`: take over once the owner's lease lapsed;
        this client's later aborts of `tx_id` act as the new owner."""
        claimed = Claimed.model_validate(await self._send(calls.claim(tx_id, owner)))
        if claimed.owner is not None:
            self._owners[tx_id] = claimed.owner
        return claimed

    async def release(self, tx_id: str, owner: Owner | None = None) -> dict[str, Any]:
        """`POST /v1/transactions/{tx_id}/release`: give the lease up for a successor."""
        chosen = _owner_of(tx_id, owner, self._owners)
        return dict(await self._send(calls.release(tx_id, chosen)))

    async def request_review(
        self, tx_id: str, action: str, *, reason: str | None = None, owner: Owner | None = None
    ) -> dict[str, Any]:
        """`POST /v1/transactions/{tx_id}/review`: hand an operation to a person."""
        chosen = _owner_of(tx_id, owner, self._owners)
        return dict(await self._send(calls.request_review(tx_id, chosen, action, reason)))

    async def catalog(self) -> list[CatalogEntry]:
        """`GET /v1/catalog`: every operation, its class, reversibility and undo."""
        body = await self._send(calls.catalog())
        return [CatalogEntry.model_validate(o) for o in body["operations"]]

    async def policy(self) -> dict[str, Any]:
        """`GET /v1/policy`: the tenant's policy in force."""
        return dict(await self._send(calls.get_policy()))

    async def set_policy(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """`PUT /v1/policy` (operator): `version` must be the next one, else 409."""
        return dict(await self._send(calls.put_policy(document)))

    async def quotas(self) -> dict[str, Any]:
        """`GET /v1/quotas`: each quota's use and its circuit breakers."""
        return dict(await self._send(calls.get_quotas()))

    async def reset_breaker(self, agent_id: str, operation: str) -> dict[str, Any]:
        """`POST /v1/quotas/breakers/reset` (operator)."""
        return dict(await self._send(calls.reset_breaker(agent_id, operation)))

    async def kill_switches(self) -> list[KillSwitch]:
        """`GET /v1/kill-switches`."""
        body = await self._send(calls.list_kill_switches())
        return [KillSwitch.model_validate(k) for k in body["kill_switches"]]

    async def engage_kill_switch(self, scope: Mapping[str, str], reason: str) -> dict[str, Any]:
        """`POST /v1/kill-switches` (operator): `scope` names an agent_id, a provider or an
        operation; while engaged, no new call in that scope reaches a provider."""
        return dict(await self._send(calls.engage_kill_switch(scope, reason)))

    async def release_kill_switch(self, switch_id: str) -> dict[str, Any]:
        """`DELETE /v1/kill-switches/{id}` (operator)."""
        return dict(await self._send(calls.release_kill_switch(switch_id)))


class Recon:
    """The blocking client: `with Recon(api_key="demo-key") as recon: recon.submit(...)`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        http: httpx.Client | None = None,
    ) -> None:
        url, headers = _settings(base_url, api_key)
        self._http = http or httpx.Client(timeout=timeout)
        self._url, self._headers, self._retries = url, headers, retries
        # The sessions this client's submissions own, by tx_id: its aborts carry them.
        self._owners: dict[str, Owner] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: calls.Call) -> Any:
        header, trace_id = calls.traceparent()
        headers = {**self._headers, "traceparent": header}
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    call.method,
                    self._url + call.path,
                    json=call.json,
                    params=call.params,
                    headers=headers,
                )
                return calls.answer(
                    response.status_code, response.content, response.headers, trace_id
                )
            except httpx.TransportError as exc:
                error: ReconError = _unreachable(call, exc, trace_id)
                if not call.idempotent or attempt >= self._retries:
                    raise error from exc
            except Unavailable as exc:
                error = exc
                if not call.idempotent or attempt >= self._retries:
                    raise
            time.sleep(calls.backoff(attempt, error))
            attempt += 1

    def submit(self, tx: Submission) -> Accepted:
        """Submit a transaction; safe to repeat (the same tx_id and body is one intent)."""
        accepted = Accepted.model_validate(self._send(calls.submit(tx)))
        if accepted.owner is not None:
            self._owners[accepted.tx_id] = accepted.owner
        return accepted

    def get(self, tx_id: str) -> Transaction:
        return Transaction.model_validate(self._send(calls.get_transaction(tx_id)))

    def events(self, tx_id: str) -> list[Event]:
        """Every event of the transaction, in `seq` order (all pages read)."""
        return [Event.model_validate(e) for e in self._all("events", calls.get_events, tx_id)]

    def _all(self, field: str, call: Any, *args: Any) -> list[Any]:
        """See `AsyncRecon._all`."""
        rows: list[Any] = []
        cursor: str | None = None
        while True:
            body = self._send(call(*args, cursor))
            rows += body[field]
            cursor = calls.next_page(body)
            if cursor is None:
                return rows

    def transactions(
        self,
        *,
        status: str | None = None,
        agent_id: str | None = None,
        provider: str | None = None,
        operation: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> TransactionPage:
        """See `AsyncRecon.transactions`."""
        found = _filters(status, agent_id, provider, operation, created_after, created_before)
        return TransactionPage.model_validate(
            self._send(calls.list_transactions(found, limit, cursor))
        )

    def drift(self) -> list[dict[str, Any]]:
        """`GET /v1/drift`, every page."""
        return self._all("drift", calls.list_drift)

    def wait(
        self,
        tx_id: str,
        *,
        timeout: float = 60.0,
        until: Collection[str] = SETTLED,
        poll_s: float = 0.25,
    ) -> Transaction:
        """See `AsyncRecon.wait`."""
        deadline = time.monotonic() + timeout
        last: Transaction | None = None
        while True:
            try:
                last = self.get(tx_id)
                if last.status in until:
                    return last
            except (NotFound, Unavailable):
                pass  # not projected yet, or the intake restarting: keep polling
            if time.monotonic() >= deadline:
                raise WaitTimeout(tx_id, timeout, last)
            time.sleep(poll_s)

    def run(self, tx: TransactionRequest, *, timeout: float = 60.0) -> Transaction:
        """Submit and wait for the outcome."""
        self.submit(tx)
        return self.wait(tx.tx_id, timeout=timeout)

    def abort(
        self,
        tx_id: str,
        *,
        reason: str | None = None,
        actor: str | None = None,
        owner: Owner | None = None,
    ) -> AbortRequested:
        """`owner`: the session to abort as; by default the one this client's submission
        of `tx_id` returned (an operator key needs none)."""
        chosen = owner or self._owners.get(tx_id)
        return AbortRequested.model_validate(self._send(calls.abort(tx_id, reason, actor, chosen)))

    def reviews(self, *, state: str | None = None, older_than_s: int | None = None) -> list[Review]:
        return [
            Review.model_validate(r)
            for r in self._all("reviews", calls.list_reviews, state, older_than_s)
        ]

    def review(self, review_id: str) -> Review:
        return Review.model_validate(self._send(calls.get_review(review_id)))

    def resolve(
        self, review_id: str, resolution: Resolution, *, note: str, actor: str | None = None
    ) -> ReviewResolving:
        body = self._send(calls.resolve_review(review_id, resolution, note, actor))
        return ReviewResolving.model_validate(body)

    def receipt(self, tx_id: str) -> dict[str, Any]:
        """`GET /v1/transactions/{tx_id}/receipt`: the transaction's evidence bundle (events,
        provider evidence, the signed checkpoint covering them) for an auditor to verify,
        e.g. with `audit verify-bundle` or verifier-go, without recon."""
        return dict(self._send(calls.get_receipt(tx_id)))

    def operation(self, op_key: str) -> dict[str, Any]:
        """`GET /v1/operations/{op_key}`."""
        return dict(self._send(calls.get_operation(op_key)))

    def preview(self, tx: Submission) -> dict[str, Any]:
        """`POST /v1/previews`: each step's effect computed by its provider, nothing applied."""
        return dict(self._send(calls.preview(tx)))

    def approve(
        self, tx_id: str, action: str, digest: str, *, expires_in_s: int | None = None
    ) -> dict[str, Any]:
        """`POST /v1/approvals`, with an operator key."""
        return dict(self._send(calls.approve(tx_id, action, digest, expires_in_s)))

    def reject_approval(self, approval_id: str) -> dict[str, Any]:
        """`POST /v1/approvals/{id}/reject`."""
        return dict(self._send(calls.reject_approval(approval_id)))

    # Sessions (README, "Succession"): `owner` names the session and, for an agent key,
    # proves it with its token.
    def claim(self, tx_id: str, owner: Owner | Mapping[str, str]) -> Claimed:
        """`POST /v1/transactions/{tx_id}/claim`: take over once the owner's lease lapsed;
        this client's later aborts of `tx_id` act as the new owner."""
        claimed = Claimed.model_validate(self._send(calls.claim(tx_id, owner)))
        if claimed.owner is not None:
            self._owners[tx_id] = claimed.owner
        return claimed

    def release(self, tx_id: str, owner: Owner | None = None) -> dict[str, Any]:
        """`POST /v1/transactions/{tx_id}/release`: give the lease up for a successor."""
        chosen = _owner_of(tx_id, owner, self._owners)
        return dict(self._send(calls.release(tx_id, chosen)))

    def request_review(
        self, tx_id: str, action: str, *, reason: str | None = None, owner: Owner | None = None
    ) -> dict[str, Any]:
        """`POST /v1/transactions/{tx_id}/review`: hand an operation to a person."""
        chosen = _owner_of(tx_id, owner, self._owners)
        return dict(self._send(calls.request_review(tx_id, chosen, action, reason)))

    def catalog(self) -> list[CatalogEntry]:
        """`GET /v1/catalog`: every operation, its class, reversibility and undo."""
        body = self._send(calls.catalog())
        return [CatalogEntry.model_validate(o) for o in body["operations"]]

    def policy(self) -> dict[str, Any]:
        """`GET /v1/policy`: the tenant's policy in force."""
        return dict(self._send(calls.get_policy()))

    def set_policy(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """`PUT /v1/policy` (operator): `version` must be the next one, else 409."""
        return dict(self._send(calls.put_policy(document)))

    def quotas(self) -> dict[str, Any]:
        """`GET /v1/quotas`: each quota's use and its circuit breakers."""
        return dict(self._send(calls.get_quotas()))

    def reset_breaker(self, agent_id: str, operation: str) -> dict[str, Any]:
        """`POST /v1/quotas/breakers/reset` (operator)."""
        return dict(self._send(calls.reset_breaker(agent_id, operation)))

    def kill_switches(self) -> list[KillSwitch]:
        """`GET /v1/kill-switches`."""
        body = self._send(calls.list_kill_switches())
        return [KillSwitch.model_validate(k) for k in body["kill_switches"]]

    def engage_kill_switch(self, scope: Mapping[str, str], reason: str) -> dict[str, Any]:
        """`POST /v1/kill-switches` (operator): `scope` names an agent_id, a provider or an
        operation; while engaged, no new call in that scope reaches a provider."""
        return dict(self._send(calls.engage_kill_switch(scope, reason)))

    def release_kill_switch(self, switch_id: str) -> dict[str, Any]:
        """`DELETE /v1/kill-switches/{id}` (operator)."""
        return dict(self._send(calls.release_kill_switch(switch_id)))
