"""`audit verify`: every transaction's events on recon.events, checked against the hash chain.

Each transaction must hold seq 1, 2, 3... in log order, each event's prev_hash the hash of
the one before and its hash that of its own content (events.envelope.verify_chain). A
record that is not an envelope, or that sits under another transaction's key, is a
problem too. The chain is not a signature: it shows that an event was removed, reordered
or altered after the fact, not who wrote it.

The verdict (events.verdict): INVALID when anything is wrong, else UNVERIFIABLE when an
event names a canonical form this code does not support, else VALID; the summary names the
canonical forms the log's events were hashed in, so an old log shows `legacy-json`.
"""

import asyncio
import multiprocessing
import os
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import Synchronized

from aiokafka.structs import ConsumerRecord, TopicPartition

from events.canonical import form_name
from events.chain_link import Link, read_link
from events.envelope import Chained, Envelope, verify_chain
from events.keys import partition_key
from events.verdict import Verdict
from projections.decode import decode_envelope
from services.cli.audit_signatures import check_checkpoints
from services.cli.log_snapshot import LogSnapshot, open_partitions, open_snapshot, where
from services.cli.progress import Progress
from services.cli.verdict import exit_code, print_json
from services.config import Settings
from services.signing_keys import verify_keys


@dataclass(frozen=True)
class Problem:
    message: str
    location: str
    tenant: str | None = None
    tx_id: str | None = None
    seq: int | None = None
    unverifiable: bool = False

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
    forms: dict[str, int] = field(default_factory=dict)  # events per canonical form
    signed: int = 0  # transactions whose chain a valid checkpoint signed

    def verdict(self) -> Verdict:
        if any(not p.unverifiable for p in self.problems):
            return Verdict.INVALID
        return Verdict.UNVERIFIABLE if self.problems else Verdict.VALID


Located = tuple[Chained, str]  # an event (Envelope or Link) and where it is on the log


def check_transaction(tenant: str, tx_id: str, located: list[Located]) -> list[Problem]:
    """verify_chain on one transaction's events (in log order), each problem placed."""
    problems = []
    for found in verify_chain([env for env, _ in located]):
        seq = found.seq
        location = next((loc for env, loc in located if env.seq == seq), located[-1][1])
        # The seq is shown on its own, unless the message is about the seq.
        message = found.message[2:] if found.message.startswith(": ") else str(found)
        problems.append(
            Problem(message, location, tenant, tx_id, seq, unverifiable=found.unverifiable)
        )
    return problems


def _decode(
    record: ConsumerRecord[bytes, bytes], problems: list[Problem]
) -> tuple[Link | Envelope, str] | None:
    # The fast reading when it can give the verdict (events.chain_link), else the
    # reference one, which also words what is wrong with the record.
    decoded: Link | Envelope | str | None = read_link(record.value)
    if decoded is None:
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


# repr=False: asyncio.run (Python 3.11) formats a repr of the task that returned a _Part
# twice when it restores the SIGINT handler (signal.getsignal wording a ValueError about the
# handler, a partial naming the task), and the generated repr spells every event read:
# 10 % of audit verify's CPU on a 255k-event log, thrown away.
@dataclass(repr=False)
class _Part:
    """What one reader found on its partitions: the unplaced problems, each transaction's
    located events, and how many events matched the filter."""

    problems: list[Problem] = field(default_factory=list)
    log: dict[tuple[str, str], list[Located]] = field(default_factory=lambda: defaultdict(list))
    events: int = 0
    forms: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # Per partition, its checkpoint records in log order (they are linked per partition).
    checkpoints: dict[int, list[tuple[bytes | None, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )


async def _read(
    snapshot: LogSnapshot,
    tenant: str | None,
    tx_id: str | None,
    advance: Callable[[int], None],
    checkpoints_topic: str,
) -> _Part:
    part = _Part()
    async for batch in snapshot.batches():
        advance(len(batch))
        for record in batch:
            if record.topic == checkpoints_topic:
                part.checkpoints[record.partition].append((record.value, where(record)))
                continue
            decoded = _decode(record, part.problems)
            if decoded is None:
                continue
            env = decoded[0]
            if (tenant and env.tenant != tenant) or (tx_id and env.tx_id != tx_id):
                continue
            part.events += 1
            part.forms[form_name(env.canon)] += 1
            part.log[(env.tenant, env.tx_id)].append(decoded)
    return part


def _chains(part: _Part) -> list[Problem]:
    problems = []
    for (t, tx), located in sorted(part.log.items()):
        problems += check_transaction(t, tx, located)
    return problems


def _signatures(
    part: _Part, environment: str, tenant: str | None, tx_id: str | None
) -> tuple[list[Problem], int]:
    """The checkpoints' problems (services.cli.audit_signatures), and how many of the
    transactions read have a signed head."""

    def wanted(t: str, tx: str) -> bool:
        return not (tenant and t != tenant) and not (tx_id and tx != tx_id)

    found, signed = check_checkpoints(
        [part.checkpoints[p] for p in sorted(part.checkpoints)],
        lambda t, tx: part.log.get((t, tx)),
        verify_keys(environment),
        wanted,
    )
    problems = [
        Problem(p.message, p.location, p.tenant, p.tx_id, p.seq, unverifiable=p.unverifiable)
        for p in found
    ]
    return problems, len(signed)


# --- reading partitions in several processes ------------------------------------------
# Every record of a transaction sits in one partition (the key is tenant/tx_id), so each
# process can check the chains of the partitions it reads on its own and hand back only
# its problems and its transactions' names. A transaction found by two processes (a record
# under a key of another partition: corruption, reported as such) is checked across
# partitions by a second, single-process pass, so the verdict never depends on the split.

_read_so_far: "Synchronized[int] | None" = None


def worker_pool(workers: int) -> tuple[ProcessPoolExecutor, "Synchronized[int]"]:
    """`workers` spawned processes to read partitions in (`_verify_partitions`), and the
    count of the records they have read."""
    context = multiprocessing.get_context("spawn")
    counter: Synchronized[int] = context.Value("q", 0)
    return ProcessPoolExecutor(workers, context, _init_worker, (counter,)), counter


def _init_worker(counter: "Synchronized[int]") -> None:
    global _read_so_far
    _read_so_far = counter


def _count(n: int) -> None:
    assert _read_so_far is not None
    with _read_so_far.get_lock():
        _read_so_far.value += n


@dataclass
class _Found:
    """What one process hands back: never its events, only what was found in them."""

    read_problems: list[Problem]
    chain_problems: list[Problem]
    keys: list[tuple[str, str]]
    events: int
    forms: dict[str, int]
    signed: int


def _found(part: _Part, environment: str, tenant: str | None, tx_id: str | None) -> _Found:
    signature_problems, signed = _signatures(part, environment, tenant, tx_id)
    return _Found(
        part.problems,
        _chains(part) + signature_problems,
        list(part.log),
        part.events,
        dict(part.forms),
        signed,
    )


def _verify_partitions(
    bootstrap: str,
    ends: dict[TopicPartition, int],
    tenant: str | None,
    tx_id: str | None,
    checkpoints_topic: str,
    environment: str,
) -> _Found:
    async def read() -> _Part:
        async with open_partitions(bootstrap, {tp: 0 for tp in ends}, ends) as snapshot:
            return await _read(snapshot, tenant, tx_id, _count, checkpoints_topic)

    return _found(asyncio.run(read()), environment, tenant, tx_id)


def _workers(requested: int | None, partitions: int, total: int) -> int:
    if requested is not None:
        return max(1, min(requested, partitions))
    # Starting a process costs about a second (it imports pydantic and the models): only
    # worth it on a log this large.
    if total < PARALLEL_FROM:
        return 1
    return max(1, min(os.cpu_count() or 1, partitions))


PARALLEL_FROM = 200_000


async def _verify_in_processes(
    settings: Settings,
    snapshot: LogSnapshot,
    workers: int,
    tenant: str | None,
    tx_id: str | None,
    progress: Progress,
) -> Report | None:
    """None when a transaction spans the processes' partitions."""
    # By partition number: partition p of recon.events and of recon.checkpoints (the
    # checkpoints of p's chains) go to the same process.
    shares: list[dict[TopicPartition, int]] = [{} for _ in range(workers)]
    for tp, end in sorted(snapshot.ends.items()):
        shares[tp.partition % workers][tp] = end
    pool, counter = worker_pool(workers - 1)
    loop = asyncio.get_running_loop()
    # This process reads the first share itself instead of waiting for the others: it has
    # imported everything a reading process needs, which a spawned one pays again (about
    # 0.7 s of CPU here), and its snapshot's consumer has fetched those partitions already.
    own = 0

    def advance(n: int) -> None:
        nonlocal own
        own += n
        progress.advance(counter.value + own - progress.count)

    with pool, progress:
        futures = [
            loop.run_in_executor(
                pool,
                _verify_partitions,
                settings.kafka_bootstrap,
                share,
                tenant,
                tx_id,
                settings.topics.checkpoints,
                settings.environment,
            )
            for share in shares[1:]
        ]
        part = await _read(
            snapshot.share(shares[0]), tenant, tx_id, advance, settings.topics.checkpoints
        )
        mine = _found(part, settings.environment, tenant, tx_id)
        del part  # its events, freed while the other processes finish
        pending = asyncio.gather(*futures)
        while not pending.done():
            await asyncio.wait([pending], timeout=0.2)
            progress.advance(counter.value + own - progress.count)
        results = [mine, *pending.result()]
    # As one process reports them: the records' own problems, then the chains' by
    # transaction (a stable sort keeps each chain's problems in seq order).
    read_problems: list[Problem] = []
    chain_problems: list[Problem] = []
    events, signed, seen, forms = 0, 0, set[tuple[str, str]](), defaultdict[str, int](int)
    for found in results:
        if seen.intersection(found.keys):
            return None
        seen.update(found.keys)
        read_problems += found.read_problems
        chain_problems += found.chain_problems
        events += found.events
        signed += found.signed
        for form, n in found.forms.items():
            forms[form] += n
    chain_problems.sort(key=lambda p: (p.tenant or "", p.tx_id or ""))
    return Report(len(seen), events, read_problems + chain_problems, dict(forms), signed)


async def verify(
    settings: Settings,
    tenant: str | None,
    tx_id: str | None,
    progress_every: int,
    bar: bool | None = None,
    workers: int | None = None,
) -> Report:
    topics = settings.topics
    async with open_snapshot(
        settings.kafka_bootstrap, [topics.events], optional=(topics.checkpoints,)
    ) as snapshot:
        progress = Progress("audit verify", progress_every, snapshot.total, bar=bar)
        partitions = len({tp.partition for tp in snapshot.ends})
        n = _workers(workers, partitions, snapshot.total)
        if n > 1:
            report = await _verify_in_processes(settings, snapshot, n, tenant, tx_id, progress)
            if report is not None:
                return report
            # A transaction spans partitions: read it all again in this process.
            await snapshot.rewind()
            progress = Progress("audit verify", progress_every, snapshot.total, bar=bar)
        with progress:
            part = await _read(snapshot, tenant, tx_id, progress.advance, topics.checkpoints)
    signature_problems, signed = _signatures(part, settings.environment, tenant, tx_id)
    problems = part.problems + _chains(part) + signature_problems
    return Report(len(part.log), part.events, problems, dict(part.forms), signed)


async def run_verify(
    settings: Settings,
    tenant: str | None,
    tx_id: str | None,
    progress_every: int,
    bar: bool | None = None,
    workers: int | None = None,
    as_json: bool = False,
) -> int:
    report = await verify(settings, tenant, tx_id, progress_every, bar, workers)
    verdict = report.verdict()
    problems = report.problems
    forms = ", ".join(f"{form} {n}" for form, n in sorted(report.forms.items())) or "none"
    if as_json:
        print_json(
            {
                "verdict": verdict.value,
                "transactions": report.transactions,
                "events": report.events,
                "canonical_forms": report.forms,
                "signed_transactions": report.signed,
                "first_problem": str(problems[0]) if problems else None,
                "problems": [
                    {
                        "message": p.message,
                        "location": p.location,
                        "tenant": p.tenant,
                        "tx_id": p.tx_id,
                        "seq": p.seq,
                        "unverifiable": p.unverifiable,
                    }
                    for p in problems
                ],
            }
        )
        return exit_code(verdict)
    for problem in problems:
        print(problem)
    scope = " ".join(
        part
        for part in (f"tenant={tenant}" if tenant else "", f"tx={tx_id}" if tx_id else "")
        if part
    )
    print(
        f"audit verify{' ' + scope if scope else ''}: {report.transactions} transactions, "
        f"{report.events} events, {len(problems)} problems; canonical forms: {forms}; "
        f"{report.signed} transactions signed; {verdict.value}"
    )
    return exit_code(verdict)
