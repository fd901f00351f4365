"""`audit verify`: every transaction's events on recon.events, checked against the hash chain.

Each transaction must hold seq 1, 2, 3... in log order, each event's prev_hash the hash of
the one before and its hash that of its own content (events.envelope.verify_chain). A
record that is not an envelope, or that sits under another transaction's key, is a
problem too. The chain is not a signature: it shows that an event was removed, reordered
or altered after the fact, not who wrote it.
"""

import re
from collections import defaultdict
from dataclasses import dataclass, field

from aiokafka.structs import ConsumerRecord

from events.envelope import Envelope, verify_chain
from events.keys import partition_key
from projections.decode import decode_envelope
from services.cli.log_snapshot import open_snapshot, where
from services.cli.progress import Progress
from services.config import Settings

_SEQ = re.compile(r"^seq (\d+)")


@dataclass(frozen=True)
class Problem:
    message: str
    location: str
    tenant: str | None = None
    tx_id: str | None = None
    seq: int | None = None

    def __str__(self) -> str:
        if self.tenant is None:
            return f"PROBLEM {self.location}: {self.message}"
        subject = f"tenant={self.tenant} tx={self.tx_id} seq={self.seq}"
        return f"PROBLEM {subject}: {self.message} ({self.location})"


@dataclass
class Report:
    transactions: int = 0
    events: int = 0
    problems: list[Problem] = field(default_factory=list)


def check_transaction(
    tenant: str, tx_id: str, located: list[tuple[Envelope, str]]
) -> list[Problem]:
    """verify_chain on one transaction's events (in log order), each problem placed."""
    problems = []
    for message in verify_chain([env for env, _ in located]):
        match = _SEQ.match(message)
        seq = int(match.group(1)) if match else None
        location = next((loc for env, loc in located if env.seq == seq), located[-1][1])
        message = message.removeprefix(f"seq {seq}: ")  # the seq is shown on its own
        problems.append(Problem(message, location, tenant, tx_id, seq))
    return problems


def _decode(
    record: ConsumerRecord[bytes, bytes], problems: list[Problem]
) -> tuple[Envelope, str] | None:
    decoded = decode_envelope(record.value)
    if isinstance(decoded, str):
        problems.append(Problem(decoded, where(record)))
        return None
    if record.key is not None and record.key != partition_key(decoded.tenant, decoded.tx_id):
        problems.append(
            Problem(
                f"record key {record.key!r} is not the transaction's",
                where(record),
                decoded.tenant,
                decoded.tx_id,
                decoded.seq,
            )
        )
    return decoded, where(record)


async def verify(
    settings: Settings,
    tenant: str | None,
    tx_id: str | None,
    progress_every: int,
    bar: bool | None = None,
) -> Report:
    problems: list[Problem] = []
    log: dict[tuple[str, str], list[tuple[Envelope, str]]] = defaultdict(list)
    events = 0
    topic = settings.topics.events
    async with open_snapshot(settings.kafka_bootstrap, [topic]) as snapshot:
        progress = Progress("audit verify", progress_every, snapshot.total, bar=bar)
        async for batch in progress.track(snapshot.batches()):
            for record in batch:
                decoded = _decode(record, problems)
                if decoded is None:
                    continue
                env = decoded[0]
                if (tenant and env.tenant != tenant) or (tx_id and env.tx_id != tx_id):
                    continue
                events += 1
                log[(env.tenant, env.tx_id)].append(decoded)
    for (t, tx), located in sorted(log.items()):
        problems += check_transaction(t, tx, located)
    return Report(transactions=len(log), events=events, problems=problems)


async def run_verify(
    settings: Settings,
    tenant: str | None,
    tx_id: str | None,
    progress_every: int,
    bar: bool | None = None,
) -> int:
    report = await verify(settings, tenant, tx_id, progress_every, bar)
    problems = report.problems
    for problem in problems:
        print(problem)
    scope = " ".join(
        part
        for part in (f"tenant={tenant}" if tenant else "", f"tx={tx_id}" if tx_id else "")
        if part
    )
    print(
        f"audit verify{' ' + scope if scope else ''}: {report.transactions} transactions, "
        f"{report.events} events, {len(problems)} problems"
    )
    return 1 if problems else 0
