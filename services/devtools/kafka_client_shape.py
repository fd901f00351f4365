"""The records of the decider's Kafka transactions, for services.devtools.kafka_client_bench.

Built by the decider's own decision (transactions.transaction.handle) on the README
transactions of the audit benchmark (reserve, charge, a receipt on commit, every call
answered, the charge confirmed again by a webhook: services.devtools.decider_micro), so
each record has the size and headers production writes. Per input, what the decider plans
(services.decider.runtime): its events on recon.events with their type header, the
transaction's state (its finished marker once it ended) on the changelog, for an answer the
observation it writes with the inline header, and when the transaction ended the signed
checkpoint of its head. The transaction adds one offset record per input partition it
consumed (services.decider.input_offsets).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from events.checkpoint import CheckpointChain, Head
from events.event_type_header import event_type_header
from events.inputs import OperationObserved
from events.keys import partition_key
from services.devtools.decider_micro import readme_inputs
from services.devtools.synthetic_log import partition_of
from services.inline_answers import INLINE_HEADER
from services.signing_keys import development_key
from transactions.finished import keep
from transactions.transaction import handle, initial_state, is_terminal

Headers = list[tuple[str, bytes]]

# The input's position in the run, on its record: the worker finds the input's decision by it.
STEP_HEADER = "ckb-step"


@dataclass
class Output:
    role: str  # "events", "state", "answers", "checkpoints"
    value: bytes
    key: bytes | None
    headers: Headers | None = None


@dataclass
class Step:
    """One input and what deciding it writes."""

    role: str  # "commands" or "observations": the input topic
    key: bytes
    value: bytes
    partition: int
    tx: tuple[str, str]  # (tenant, tx_id): the decider's key of the transaction's state
    outputs: list[Output] = field(default_factory=list)


def steps(transactions: int) -> list[Step]:
    """The inputs of `transactions` README transactions, each transaction's in order."""
    signing = development_key()
    chains: dict[int, CheckpointChain] = {}
    found: list[Step] = []
    for index in range(transactions):
        inputs = readme_inputs(index)
        state = initial_state(inputs[0].tenant, inputs[0].tx_id)
        key = partition_key(state.tenant, state.tx_id)
        partition = partition_of(key)
        for message in inputs:
            answer = isinstance(message, OperationObserved)
            value = message.model_dump_json().encode()
            step = Step(
                "observations" if answer else "commands",
                key,
                value,
                partition,
                (state.tenant, state.tx_id),
            )
            state, envelopes = handle(state, message)
            if answer:
                step.outputs.append(Output("answers", value, key, [INLINE_HEADER]))
            for envelope in envelopes:
                body = envelope.model_dump_json().encode()
                step.outputs.append(Output("events", body, key, [event_type_header(envelope.type)]))
            kept = keep(state)
            step.outputs.append(Output("state", kept.model_dump_json().encode(), key))
            if envelopes and is_terminal(state):
                last = envelopes[-1]
                head = Head(last.tenant, last.tx_id, last.seq, last.hash)
                chain = chains.setdefault(partition, CheckpointChain())
                at = datetime(2026, 12, 4, tzinfo=UTC).isoformat()
                for checkpoint in chain.records(signing, at, [head]):
                    step.outputs.append(Output("checkpoints", checkpoint, None))
            found.append(step)
    return found
