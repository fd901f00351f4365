"""A synthetic but valid recon log for the audit benchmark: transactions run through the
real decider (transactions.transaction.handle, so every event, hash chain and marker
is what production writes), their inputs as the records of recon.commands and
recon.observations, stamped with simulated Kafka times.

Each transaction is the README's: reserve, charge, then a receipt on commit; every call
answered at once, and one in `webhook_every` also confirmed by a late webhook (recorded
as ObservationIgnored), for eleven or twelve events per transaction. After each input that
leaves the transaction ended, a checkpoint of its head signed with the development key
(role 'checkpoints'), as a decider deciding one input per batch writes it: the most
checkpoints per event an auditor meets. Group commit left that bound where it was: a
late webhook's ObservationIgnored waits for the partition's next Kafka transaction, but
it leaves its transaction ended, so that transaction still signs. Counted on a real stack
(docs/audit.md), the decider writes 1.87 checkpoints per transaction of 11 events at
concurrency 1 (0.17 per event; here 1.5 of 8.5, 0.18) and 0.09-0.11 per event at
concurrency 10-30, where one checkpoint signs 3-5 heads. The checkpoints are built by the
decider's own function (events.checkpoint.CheckpointChain), each naming the one before it
on its partition: `log_records` writes a range of transactions as one decider that took
every partition at its first transaction, so each range starts a new chain per partition
(audit_bench writes ranges of 400 transactions: a chain break every ~150 checkpoints of a
partition, where a decider breaks one only when it takes the partition again; so an
auditor checks a few more signatures here than on a real log, never fewer). Pure apart
from the clock-free arithmetic: the same arguments yield the same records.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from aiokafka.partitioner import DefaultPartitioner

from events.checkpoint import CheckpointChain, Head
from events.definition import Compensation, OperationKind, OperationSpec
from events.envelope import Envelope
from events.inputs import DeciderInput, OperationObserved, Outcome, Source, SubmitTransaction
from events.keys import compensation_key, op_key, partition_key
from events.observation import Seen, observation
from events.topics import PARTITIONS
from services.providers.sandbox_operations import SANDBOX_OPERATIONS
from services.signing_keys import development_key
from transactions.finished import finish, is_finished
from transactions.transaction import handle, initial_state, is_terminal

_KEY = development_key()

TENANTS = ("demo", "acme", "globex")
# Simulated spacing: transactions start STEP_MS apart, each answer comes ANSWER_MS after
# the call, and the decider writes its events DECIDE_MS after the input.
STEP_MS = 40
ANSWER_MS = 180
DECIDE_MS = 3


@dataclass(frozen=True)
class Produced:
    """One record to produce: topic role ('commands', 'observations', 'events',
    'decider_state'), key, value and Kafka timestamp (ms)."""

    role: str
    key: bytes
    value: bytes
    timestamp_ms: int


def tx_coordinates(index: int) -> tuple[str, str]:
    return TENANTS[index % len(TENANTS)], f"bench-{index:08d}"


def operation_spec(
    tenant: str,
    tx_id: str,
    action: str,
    operation: str,
    kind: OperationKind,
    payload: dict[str, object],
    compensation: str | None,
) -> OperationSpec:
    key = op_key(tenant=tenant, environment="bench", provider="sandbox", tx_id=tx_id, action=action)
    # With the facts the intake records from the sandbox's declaration, as production writes.
    return OperationSpec(
        action=action,
        kind=kind,
        provider="sandbox",
        operation=operation,
        payload=payload,
        op_key=key,
        facts=SANDBOX_OPERATIONS[operation].facts,
        compensation=(
            Compensation(operation=compensation, facts=SANDBOX_OPERATIONS[compensation].facts)
            if compensation
            else None
        ),
        compensation_key=compensation_key(key) if compensation else None,
    )


def log_records(first: int, last: int, start: datetime, webhook_every: int = 4) -> list[Produced]:
    """Transactions first..last-1 in order, as one decider writes them: each partition's
    checkpoints linked from the first of the range."""
    chains: dict[int, CheckpointChain] = {}
    return [
        r for i in range(first, last) for r in transaction_records(i, start, webhook_every, chains)
    ]


def partition_of(key: bytes) -> int:
    """The partition the producers' default partitioner gives this key on recon's topics."""
    partitions = list(range(PARTITIONS))
    return int(DefaultPartitioner()(key, partitions, partitions))


def transaction_records(
    index: int,
    start: datetime,
    webhook_every: int = 4,
    chains: dict[int, CheckpointChain] | None = None,
) -> list[Produced]:
    """Every record of transaction `index`, in the order they are produced, and last its
    finished-transaction marker (role 'decider_state'). Its checkpoints continue the
    chain of their partition in `chains` (updated); without it they start one of their own."""
    tenant, tx_id = tx_coordinates(index)
    key = partition_key(tenant, tx_id)
    chain = (
        CheckpointChain()
        if chains is None
        else chains.setdefault(partition_of(key), CheckpointChain())
    )
    at = start + timedelta(milliseconds=index * STEP_MS)
    ops = (
        operation_spec(
            tenant,
            tx_id,
            "reserve",
            "inventory.reserve",
            OperationKind.STEP,
            {"sku": f"sku-{index % 997}", "qty": 1},
            "inventory.release",
        ),
        operation_spec(
            tenant,
            tx_id,
            "charge",
            "payments.charge",
            OperationKind.STEP,
            {"amount": 1299 + index % 100, "currency": "usd", "customer": f"cus_{index}"},
            "payments.refund",
        ),
        operation_spec(
            tenant,
            tx_id,
            "receipt",
            "email.send",
            OperationKind.ON_COMMIT,
            {"to": f"buyer{index}@example.com", "template": "receipt"},
            None,
        ),
    )
    inputs: list[tuple[str, DeciderInput]] = [
        (
            "commands",
            SubmitTransaction(
                message_id=f"submit:{tenant}:{tx_id}:{index:016x}",
                tenant=tenant,
                tx_id=tx_id,
                agent_id=f"agent-{index % 50}",
                fingerprint=f"{index:064x}",
                operations=ops,
                issued_at=at,
            ),
        )
    ]
    for n, spec in enumerate(ops, start=1):
        inputs.append(("observations", answer(tenant, tx_id, spec, at, n, Source.RESPONSE)))
    if webhook_every and index % webhook_every == 0:
        inputs.append(("observations", answer(tenant, tx_id, ops[1], at, 5, Source.WEBHOOK)))
    state = initial_state(tenant, tx_id)
    records: list[Produced] = []
    for role, message in inputs:
        issued = (
            message.issued_at
            if isinstance(message, SubmitTransaction)
            else (message.observed_at if isinstance(message, OperationObserved) else at)
        )
        ms = int(issued.timestamp() * 1000)
        records.append(Produced(role, key, message.model_dump_json().encode(), ms))
        state, envelopes = handle(state, message)
        records += [_event(key, env, ms + DECIDE_MS) for env in envelopes]
        if envelopes and is_terminal(state):
            head = Head(tenant, tx_id, envelopes[-1].seq, envelopes[-1].hash)
            signed_at = (at + timedelta(milliseconds=DECIDE_MS)).isoformat()
            for value in chain.records(_KEY, signed_at, [head]):
                records.append(Produced("checkpoints", key, value, ms + DECIDE_MS))
    assert is_finished(state), (tx_id, state.status)
    records.append(
        Produced("decider_state", key, finish(state).model_dump_json().encode(), ms + DECIDE_MS)
    )
    return records


def answer(
    tenant: str, tx_id: str, spec: OperationSpec, at: datetime, n: int, source: Source
) -> OperationObserved:
    attempt = 0 if source is Source.WEBHOOK else 1
    effect_id = f"eff_{spec.op_key[4:20]}"
    return observation(
        message_id=f"{spec.op_key}:{attempt}:{source.value}:succeeded:0",
        tenant=tenant,
        tx_id=tx_id,
        action=spec.action,
        op_key=spec.op_key,
        attempt=attempt,
        source=source,
        seen=Seen(Outcome.SUCCEEDED, 200, effect_id, {"id": effect_id, "status": "succeeded"}),
        observed_at=at + timedelta(milliseconds=n * ANSWER_MS),
        by_dispatcher=source is Source.RESPONSE,
    )


def _event(key: bytes, envelope: Envelope, timestamp_ms: int) -> Produced:
    return Produced("events", key, envelope.model_dump_json().encode(), timestamp_ms)


def simulated_start(transactions: int, now: datetime | None = None) -> datetime:
    """The log ends about now: Kafka's time-based retention must not take the inputs."""
    now = now or datetime.now(UTC)
    return now - timedelta(milliseconds=transactions * STEP_MS + 10 * ANSWER_MS)
