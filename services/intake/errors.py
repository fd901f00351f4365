"""Refusals the API answers with `{"error": code, "message": what to fix}`, and the one
place (services.intake.app) where they, the domain's refusals and a database that does not
answer become HTTP answers."""

import math
from typing import Any, TypeVar

import asyncpg
from pydantic import BaseModel, ValidationError

# What a request meets when Postgres is down or restarting: answered 503, retry later.
# A database that is down, crashed or still starting: 503, the client retries. Postgres
# answers a crash or shutdown with SQLSTATE class 57 (admin/crash shutdown, cannot connect
# now), which asyncpg raises as OperatorInterventionError, not as a connection error.
DATABASE_DOWN = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,
)

# Text Postgres cannot store (a NUL) in a request: the client's mistake, refused 422 with
# this message by both doors (services.intake.app, services.intake.kafka_intents).
UNSTORABLE = (asyncpg.CharacterNotInRepertoireError, asyncpg.UntranslatableCharacterError)
UNSTORABLE_MESSAGE = "text must not contain NUL (\\u0000) characters"


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        # Fields a client acts on beside the message (duplicate_intent's `duplicate_of`).
        self.details = details or {}
        # When the same request may succeed: sent as Retry-After (a 503 gets RETRY_AFTER_S).
        self.retry_after_s = retry_after_s
        if retry_after_s is None and status == 503:
            self.retry_after_s = RETRY_AFTER_S

    def headers(self) -> dict[str, str]:
        return retry_after(self.retry_after_s)

    def body(self) -> dict[str, Any]:
        return {**self.details, "error": self.code, "message": self.message}


# What a 503 suggests: Kafka or Postgres recovering from a restart or an election takes
# seconds; clients add jitter of their own (the SDK does), so retries do not arrive in step.
RETRY_AFTER_S = 1.0


def retry_after(seconds: float | None) -> dict[str, str]:
    """The Retry-After header (whole seconds, at least 1) for a refusal worth retrying."""
    return {} if seconds is None else {"Retry-After": str(max(1, math.ceil(seconds)))}


def unknown_transaction(tx_id: str) -> ApiError:
    # The same answer for another tenant's transaction as for a missing one.
    return ApiError(
        404, "not_found", f"no transaction {tx_id!r} for this API key's tenant; check the tx_id"
    )


def not_yet_known(code: str, what: str, remaining_s: float, then: str, tail: str = "") -> ApiError:
    """409 for a different body over a claim whose command Kafka did not acknowledge:
    whether that command landed is known only once the pending horizon has passed."""
    return ApiError(
        409,
        code,
        f"{what} that Kafka has not acknowledged, and whether it was recorded is still being "
        f"determined; retry in {max(1, round(remaining_s))} s (if it was recorded, {then}){tail}",
        retry_after_s=max(1.0, remaining_s),
    )


def invalid_request(errors: Any) -> ApiError:
    """422 with one `where: what` per problem, so a person can fix the request."""
    return ApiError(422, "invalid_request", summary(errors))


M = TypeVar("M", bound=BaseModel)


def parsed(raw: bytes, model: type[M]) -> M:
    """A request body as `model`, or the 422 that says what to fix."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise invalid_request(exc.errors()) from None


def summary(errors: Any) -> str:
    parts = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        message = str(error.get("msg", "invalid"))
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts) or "invalid request"
