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

Round trips (issue 24, item 5): a new tx_id naming no natural key, the common case, is
recorded by one statement (`record_new`), which writes the `intents` row and its
`intent_keys` together (one statement: no crash falls between them) if the tenant's policy
in force is still the one the submission was checked under (`stamp_in_force`; the intake
checks under a cached policy, services.intake.policy_cache), and nothing otherwise
(`Recorded.POLICY_MOVED`: check again). That statement is shared by the submissions that
reach it at the same time (services.intake.intent_claims). Anything else, a tx_id already
taken or a natural key to claim, takes `claim`'s path, in one Postgres transaction, with
the same guard first. Then
`mark_produced`, after Kafka's acknowledgement, is the second write of a submission, one
statement for the submissions acknowledged at the same time (services.intake.produced_marks).

A store, not a route (its statements are the guard's rule): every statement is bound to the
Intent's tenant, which the submission's door took from its credential (the API key's
principal, or the Kafka record's key), never from the body.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import asyncpg
from pydantic import TypeAdapter

from events.definition import Leg, OperationSpec
from events.rules import IMMUTABLE_RULE
from events.str_enum import StrEnum
from services.intake import natural_keys
from services.intake.errors import ApiError, not_yet_known
from services.intake.immutable import changes
from services.unnest_params import unnest_params

_SPECS = TypeAdapter(tuple[OperationSpec, ...])


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
    # The stamp of the policy the submission was checked under
    # (services.intake.submission_gate.InForce): nothing is recorded unless it is still the
    # one in force. None: not checked (a caller that judged no policy).
    policy_stamp: str | None = None

    def operations_json(self) -> str:
        # One serialisation of them all: a model_dump per spec and json.dumps of the list
        # cost a submission 18 us in-process, this 6 (issue 24); the column is jsonb, so
        # only the value counts, not the spelling.
        return _SPECS.dump_json(self.operations).decode()

    def row(self) -> tuple[object, ...]:
        """Its `intents` columns as a new row's INSERT names them: tenant, tx_id,
        fingerprint, agent_id, operations, policy_version, session_id, submitted_by,
        task_id."""
        return (
            self.tenant,
            self.tx_id,
            self.fingerprint,
            self.agent_id,
            self.operations_json(),
            self.policy_version,
            self.session_id,
            self.submitted_by,
            self.task_id,
        )

    def names_natural_keys(self) -> bool:
        return any(spec.natural_key is not None for spec in self.operations)


class PolicyMoved(Exception):
    """The tenant's policy in force is not the one the intent was checked under (another
    was installed since it was read): nothing was recorded; check the submission again."""


def stamp_in_force(tenant: str, stamp: str) -> str:
    """SQL, true when the tenant (parameter `tenant`) has in force the policy of `stamp`
    (services.intake.submission_gate.InForce.stamp, spelled the same way), or `stamp` is NULL."""
    return (
        f"({stamp}::text IS NULL OR coalesce((SELECT version || ':' || digest"
        f" FROM governance_policies WHERE tenant = {tenant}), '') = {stamp})"
    )


async def claim(
    conn: asyncpg.Connection, intent: Intent, horizon_s: float
) -> tuple[OperationSpec, ...]:
    """Take the tx_id for this intent before its command is produced, or raise the 409
    (or PolicyMoved, recording nothing). Answers the operations to produce: the intent's,
    a step whose natural key another transaction holds with another payload gated on a
    person (services.intake.natural_keys, whose claims are taken in this same transaction).
    Judged in one transaction, the row locked: the path of a tx_id already taken (a retry,
    a racing submission, another body) or of natural keys to claim. A new tx_id naming
    none is recorded by `record_new` first (services.intake.intent_claims); this writes
    the same rows for it."""
    async with conn.transaction():
        if intent.policy_stamp is not None and not await conn.fetchval(
            f"SELECT {stamp_in_force('$1', '$2')}", intent.tenant, intent.policy_stamp
        ):
            raise PolicyMoved
        inserted = await conn.fetchval(
            "INSERT INTO intents"
            " (tenant, tx_id, fingerprint, agent_id, operations, produced, policy_version,"
            " session_id, submitted_by, task_id)"
            " VALUES ($1, $2, $3, $4, $5::jsonb, false, $6, $7, $8, $9)"
            " ON CONFLICT (tenant, tx_id) DO NOTHING RETURNING 1",
            *intent.row(),
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


class Recorded(StrEnum):
    """What `record_new` did with an intent."""

    NEW = "new"  # its row and keys are written: the tx_id is this intent's
    TAKEN = "taken"  # nothing written: the tx_id has a row already, for `claim` to judge
    POLICY_MOVED = "policy_moved"  # nothing written: the tenant's policy is another now


def _insert_keys(first: int, joined: str = "") -> str:
    """SQL: the keys of `_key_rows` (parameters $first to $first+4), those of the intents
    `joined` names when given. A key already written stays its first writer's (an op key
    names one tenant, transaction, provider and action: events.keys.op_key)."""
    arrays = (f"${first + i}::text[]" for i in range(5))
    return (
        "INSERT INTO intent_keys (key, tenant, tx_id, action, leg)"
        " SELECT k.key, k.tenant, k.tx_id, k.action, k.leg"
        f" FROM {unnest_params(*arrays)} AS k (tenant, tx_id, key, action, leg) {joined}"
        " ON CONFLICT (key) DO NOTHING"
    )


# New tx_ids' rows and their keys (as `_write_keys` writes them) in one statement, each row
# under its own policy guard; the keys only of the rows inserted, so a tx_id already taken
# keeps its own. Rows are inserted in key order, so two intakes recording the same tx_ids
# at once take them in the same order (as the marks lock theirs). One answer per row asked,
# in the order asked.
_RECORD_NEW = f"""
WITH asked AS MATERIALIZED (
    SELECT a.*, {stamp_in_force("a.tenant", "a.stamp")} AS in_force
    FROM {
    unnest_params(
        "$1::int[]",
        "$2::text[]",
        "$3::text[]",
        "$4::text[]",
        "$5::text[]",
        "$6::text[]",
        "$7::int[]",
        "$8::text[]",
        "$9::text[]",
        "$10::text[]",
        "$11::text[]",
    )
} AS a (n, tenant, tx_id, fingerprint, agent_id, operations, policy_version, session_id,
            submitted_by, task_id, stamp)
),
intent AS (
    INSERT INTO intents (tenant, tx_id, fingerprint, agent_id, operations, produced,
                         policy_version, session_id, submitted_by, task_id)
    SELECT tenant, tx_id, fingerprint, agent_id, operations::jsonb, false,
           policy_version, session_id, submitted_by, task_id
    FROM asked WHERE in_force ORDER BY tenant, tx_id
    ON CONFLICT (tenant, tx_id) DO NOTHING
    RETURNING tenant, tx_id
),
keys AS ({_insert_keys(12, joined="JOIN intent i ON i.tenant = k.tenant AND i.tx_id = k.tx_id")})
SELECT a.in_force,
       EXISTS (SELECT 1 FROM intent i WHERE i.tenant = a.tenant AND i.tx_id = a.tx_id) AS inserted
FROM asked a ORDER BY a.n
"""


async def record_new(conn: asyncpg.Connection, asked: Sequence[Intent]) -> list[Recorded]:
    """Record each intent of `asked` (none naming a natural key) whose tx_id is new, in
    one statement; what was done with each, in order. The same rows as `claim`'s
    transaction writes for it (`_judged` has no key to claim, `_write_keys` the same keys).
    `asked` names each tx_id once: two bodies of one tx_id would both find a row inserted."""
    rows = [intent.row() for intent in asked]
    answers = await conn.fetch(
        _RECORD_NEW,
        list(range(len(asked))),
        *(list(column) for column in zip(*rows, strict=True)),
        [intent.policy_stamp for intent in asked],
        *_key_rows(asked),
    )
    return [
        Recorded.POLICY_MOVED
        if not answer["in_force"]
        else Recorded.NEW
        if answer["inserted"]
        else Recorded.TAKEN
        for answer in answers
    ]


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
    await mark_all_produced(conn, [intent])


# Each intent's row, if it still holds the body that was produced, is marked produced. The
# rows are locked in key order first (ORDER BY before FOR UPDATE locks them in that order),
# so two intakes marking the same tx_ids at once (a client retrying at another instance)
# wait for each other instead of deadlocking. The arrays are read through
# services.unnest_params: planned once per connection, not per call.
_MARK_PRODUCED = f"""
WITH marked AS (
    SELECT i.tenant, i.tx_id FROM intents i
    JOIN {unnest_params("$1::text[]", "$2::text[]", "$3::text[]")} AS m (tenant, tx_id, fingerprint)
      ON i.tenant = m.tenant AND i.tx_id = m.tx_id AND i.fingerprint = m.fingerprint
    WHERE NOT i.produced
    ORDER BY i.tenant, i.tx_id
    FOR UPDATE OF i
)
UPDATE intents i SET produced = true FROM marked
WHERE i.tenant = marked.tenant AND i.tx_id = marked.tx_id
"""


async def mark_all_produced(conn: asyncpg.Connection, produced: Sequence[Intent]) -> None:
    """Mark every intent of `produced` as acknowledged by Kafka, in one statement."""
    await conn.execute(
        _MARK_PRODUCED,
        [intent.tenant for intent in produced],
        [intent.tx_id for intent in produced],
        [intent.fingerprint for intent in produced],
    )


async def _projected(conn: asyncpg.Connection, intent: Intent) -> bool:
    found = await conn.fetchval(
        "SELECT 1 FROM transactions WHERE tenant = $1 AND tx_id = $2",
        intent.tenant,
        intent.tx_id,
    )
    return found is not None


async def _write_keys(conn: asyncpg.Connection, intent: Intent) -> None:
    """Each leg's keys, for the webhook ingress's lookup by primary key (issue 7, item 17),
    in one statement."""
    await conn.execute(_insert_keys(1), *_key_rows([intent]))


def _key_rows(
    intents: Sequence[Intent],
) -> tuple[list[str], list[str], list[str], list[str], list[str]]:
    """Each leg's tenant, tx_id, key, action and leg (forward, compensation), as five
    columns."""
    columns: tuple[list[str], list[str], list[str], list[str], list[str]] = ([], [], [], [], [])
    tenants, tx_ids, keys, actions, legs = columns
    for intent in intents:
        for spec in intent.operations:
            for key, leg in (
                (spec.op_key, Leg.FORWARD),
                (spec.compensation_key, Leg.COMPENSATION),
            ):
                if key is not None:
                    tenants.append(intent.tenant)
                    tx_ids.append(intent.tx_id)
                    keys.append(key)
                    actions.append(spec.action)
                    legs.append(leg.value)
    return columns


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
