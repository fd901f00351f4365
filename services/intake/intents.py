"""The intake's guard on a tx_id: the `intents` row, and what it means while Kafka has not
acknowledged its SubmitTransaction (issue 7, item 4).

The row is written before the command is produced, so that concurrent or repeated
submissions of one tx_id become one intent and a different body is refused. It is a
promise only once `produced` is true (the broker acknowledged the command): before that,
GET answers 404, and the row must not block the tx_id forever when the produce failed.

What an unacknowledged row allows, and why:

- The same body again: produced again (a retry after a 503 or a crash); harmless, the
  decider accepts only the first SubmitTransaction of a tx_id.
- A different body: the danger is that the first command did reach Kafka and only its
  acknowledgement was lost; the decider would then run the first body (first wins) while
  the intake answered 202 to the second. So the second body takes the tx_id over only when
  the last produce attempt is older than RECON_PENDING_HORIZON_S, which is longer than the
  intake producer's delivery bound (services.intake.produce: past it the first command is
  in the log or never will be), and the projection holds no transaction for the tx_id
  (a first command that did land has been accepted by the decider by then). Before that,
  `409 tx_pending`, retry later; if the first command did land, `409 tx_conflict`.

The one case this cannot see: a first command that landed while the decider or the
projector lags by more than the horizon. The decider then runs the first body and ignores
the second; the GET shows the first body's transaction.

Every timestamp is Postgres's `now()`, so the intake's clock plays no part.

A store, not a route (its statements are the guard's rule): every statement is bound to the
Intent's tenant, which the submission's door took from its credential (the API key's
principal, or the Kafka record's key), never from the body.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import asyncpg

from events.definition import Leg, OperationSpec
from events.rules import IMMUTABLE_RULE
from services.intake import natural_keys
from services.intake.errors import ApiError, not_yet_known
from services.intake.immutable import changes


@dataclass(frozen=True)
class Intent:
    tenant: str
    tx_id: str
    fingerprint: str
    agent_id: str
    operations: tuple[OperationSpec, ...]
    # The version of the tenant's policy the submission was checked under (0: none).
    policy_version: int = 0
    # The submitting session (its first owner); None only for rows from before sessions.
    session_id: str | None = None
    # The principal that submitted it (services.intake.auth.Principal.name); None: the
    # Kafka door, whose producer the broker authenticates.
    submitted_by: str | None = None
    # Per action, how long its natural key is held: the window its provider declares for
    # the operation (events.catalog.OperationInfo.natural_key_window_s); an action not
    # listed holds it for the default.
    natural_key_windows: Mapping[str, int] = field(default_factory=dict)
    # The task the submission names (its authority, re-judged at each call); None: none.
    task_id: str | None = None

    def operations_json(self) -> str:
        return json.dumps([spec.model_dump(mode="json") for spec in self.operations])


async def claim(
    conn: asyncpg.Connection, intent: Intent, horizon_s: float
) -> tuple[OperationSpec, ...]:
    """Take the tx_id for this intent before its command is produced, or raise the 409.
    Answers the operations to produce: the intent's, a step whose natural key another
    transaction holds with another payload gated on a person (services.intake.natural_keys,
    whose claims are taken in this same transaction)."""
    async with conn.transaction():
        inserted = await conn.fetchval(
            "INSERT INTO intents"
            " (tenant, tx_id, fingerprint, agent_id, operations, produced, policy_version,"
            " session_id, submitted_by, task_id)"
            " VALUES ($1, $2, $3, $4, $5::jsonb, false, $6, $7, $8, $9)"
            " ON CONFLICT (tenant, tx_id) DO NOTHING RETURNING 1",
            intent.tenant,
            intent.tx_id,
            intent.fingerprint,
            intent.agent_id,
            intent.operations_json(),
            intent.policy_version,
            intent.session_id,
            intent.submitted_by,
            intent.task_id,
        )
        if inserted:
            judged = await _judged(conn, intent, horizon_s)
            await _write_keys(conn, judged)
            return judged.operations
        row = await conn.fetchrow(
            "SELECT fingerprint, produced, operations,"
            " extract(epoch FROM now() - attempted_at)::float8 AS age_s"
            " FROM intents WHERE tenant = $1 AND tx_id = $2 FOR UPDATE",
            intent.tenant,
            intent.tx_id,
        )
        if row["fingerprint"] == intent.fingerprint:
            if row["produced"]:
                # Landed: the decider holds the first command and ignores this one.
                return intent.operations
            # A new attempt: the horizon counts from the latest one.
            await conn.execute(
                "UPDATE intents SET attempted_at = now(),"
                " policy_version = greatest(policy_version, $3)"
                " WHERE tenant = $1 AND tx_id = $2",
                intent.tenant,
                intent.tx_id,
                intent.policy_version,
            )
            return (await _judged(conn, intent, horizon_s)).operations
        if row["produced"] or await _projected(conn, intent):
            raise _conflict(intent.tx_id, changes(json.loads(row["operations"]), intent.operations))
        if row["age_s"] <= horizon_s:
            raise _pending(intent.tx_id, horizon_s - row["age_s"])
        # The earlier body never landed: its natural keys are free again.
        await natural_keys.release_keys(conn, intent.tenant, intent.tx_id)
        await conn.execute(
            "UPDATE intents SET fingerprint = $3, agent_id = $4, operations = $5::jsonb,"
            " created_at = now(), attempted_at = now(), policy_version = $6,"
            " submitted_by = $7, task_id = $8"
            " WHERE tenant = $1 AND tx_id = $2",
            intent.tenant,
            intent.tx_id,
            intent.fingerprint,
            intent.agent_id,
            intent.operations_json(),
            intent.policy_version,
            intent.submitted_by,
            intent.task_id,
        )
        await conn.execute(
            "DELETE FROM intent_keys WHERE tenant = $1 AND tx_id = $2",
            intent.tenant,
            intent.tx_id,
        )
        judged = await _judged(conn, intent, horizon_s)
        await _write_keys(conn, judged)
        return judged.operations


async def _judged(conn: asyncpg.Connection, intent: Intent, horizon_s: float) -> Intent:
    """The intent with its natural keys claimed, its row holding the operations to produce."""
    specs = await natural_keys.claim_keys(
        conn, intent.tenant, intent.tx_id, intent.operations, horizon_s, intent.natural_key_windows
    )
    if specs == intent.operations:
        return intent
    judged = replace(intent, operations=specs)
    await conn.execute(
        "UPDATE intents SET operations = $3::jsonb WHERE tenant = $1 AND tx_id = $2",
        intent.tenant,
        intent.tx_id,
        judged.operations_json(),
    )
    return judged


async def mark_produced(conn: asyncpg.Connection, intent: Intent) -> None:
    await conn.execute(
        "UPDATE intents SET produced = true"
        " WHERE tenant = $1 AND tx_id = $2 AND fingerprint = $3 AND NOT produced",
        intent.tenant,
        intent.tx_id,
        intent.fingerprint,
    )


async def _projected(conn: asyncpg.Connection, intent: Intent) -> bool:
    found = await conn.fetchval(
        "SELECT 1 FROM transactions WHERE tenant = $1 AND tx_id = $2",
        intent.tenant,
        intent.tx_id,
    )
    return found is not None


async def _write_keys(conn: asyncpg.Connection, intent: Intent) -> None:
    """Each leg's keys, for the webhook ingress's lookup by primary key (issue 7, item 17)."""
    rows: list[tuple[Any, ...]] = []
    for spec in intent.operations:
        rows.append((spec.op_key, intent.tenant, intent.tx_id, spec.action, Leg.FORWARD.value))
        if spec.compensation_key is not None:
            rows.append(
                (
                    spec.compensation_key,
                    intent.tenant,
                    intent.tx_id,
                    spec.action,
                    Leg.COMPENSATION.value,
                )
            )
    await conn.executemany(
        "INSERT INTO intent_keys (key, tenant, tx_id, action, leg) VALUES ($1, $2, $3, $4, $5)"
        " ON CONFLICT (key) DO NOTHING",
        rows,
    )


def _conflict(tx_id: str, changed: str) -> ApiError:
    return ApiError(
        409,
        "tx_conflict",
        f"tx_id {tx_id!r} was already submitted with a different body ({changed}); "
        f"rule operations_immutable: {IMMUTABLE_RULE}. "
        "Resubmit the original body to retry, or use a new tx_id for a new intent",
    )


def _pending(tx_id: str, remaining_s: float) -> ApiError:
    what = f"tx_id {tx_id!r} was submitted with a different body"
    then = "this body will be refused with tx_conflict"
    return not_yet_known("tx_pending", what, remaining_s, then, ", or use a new tx_id")
