"""Micro-benchmark of the decider's Python per event: decide, seal, fold, and the JCS bytes.

`python -m services.devtools.decider_micro` runs README transactions (reserve, charge, a
receipt on commit; every call answered, the charge confirmed again by a webhook: the audit
benchmark's, services.devtools.synthetic_log) through transactions.transaction.handle, no
I/O, and prints microseconds of CPU per event, the best of `--rounds` rounds (the one least
disturbed by the machine's other work):

- handle: what the runtime calls per input (decide, seal, and the state's fold);
- decide, seal: each alone, on the same inputs and decisions;
- evolve: the fold of one decided event into the state;
- record: the fold of one sealed event as a restore from the log does it (reads the event
  back out of its envelope);
- write: the JSON the runtime writes per input, each envelope and the state it keeps
  (`model_dump_json`, per event as the rest);
- jcs / rfc8785: the canonical bytes of a sealed envelope's content, events.canonical.jcs
  against the pure-Python reference it must equal;
- marker: per state that ends finished (the last input's and a late webhook's), its marker
  made (`finish`) and revived (`revive`), as the runtime does at every input of a
  finished transaction; microseconds per marker, not per event;
- consume: the block the runtime opens around each input it reads from Kafka
  (`tracing.consuming`, tracing off, a record with no trace context: the benchmark's);
  microseconds per input.

It uses only functions that main has had since sealing was in JCS, so the same file runs
against an older checkout for a before/after (`PYTHONPATH=<checkout> python
<this file>`). The process's CPU time is read, not the wall clock, so that a shared
machine's other work weighs less; still, run it with PYTHONDONTWRITEBYTECODE unset and
compare before and after in alternation (docs/benchmark.md).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace

import rfc8785
from pydantic import BaseModel

from events.canonical import jcs
from events.envelope import Envelope, seal
from events.inputs import DeciderInput, parse_input
from events.transaction_events import Event
from services import tracing
from services.devtools.synthetic_log import transaction_records
from transactions.finished import FinishedTransaction, finish, is_finished, revive
from transactions.state import TransactionState
from transactions.transaction import decide, evolve, handle, initial_state, record

T0 = datetime(2026, 12, 3, tzinfo=UTC)


def readme_inputs(index: int) -> list[DeciderInput]:
    """Transaction `index` of the audit benchmark's log (services.devtools.synthetic_log):
    the README's, each call answered, the charge confirmed again by a webhook."""
    records = transaction_records(index, T0, webhook_every=1)
    return [parse_input(r.value) for r in records if r.role in ("commands", "observations")]


def _best_us(work: Callable[[], object], per: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        began = time.process_time()  # CPU, not wall: the machine is shared
        work()
        times.append(time.process_time() - began)
    return min(times) * 1e6 / per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    transactions = [readme_inputs(i) for i in range(args.transactions)]
    # Each input with the state it is decided on, its decision, and its envelopes.
    decided: list[tuple[TransactionState, DeciderInput, list[Event]]] = []
    sealed: list[tuple[TransactionState, list[Envelope]]] = []
    # What the runtime writes per input: its envelopes and the state it keeps after it.
    written: list[tuple[list[Envelope], BaseModel]] = []
    for inputs in transactions:
        state = initial_state("demo", inputs[0].tx_id)
        for message in inputs:
            decided.append((state, message, decide(state, message)))
            after, envelopes = handle(state, message)
            sealed.append((state, envelopes))
            written.append((envelopes, finish(after) if is_finished(after) else after))
            state = after
    events = sum(len(e) for _, _, e in decided)
    finished = [kept for _, kept in written if isinstance(kept, FinishedTransaction)]
    bodies = [e.model_dump(mode="json", exclude={"hash"}) for _, es in sealed for e in es]

    def run_handle() -> None:
        for inputs in transactions:
            state = initial_state("demo", inputs[0].tx_id)
            for message in inputs:
                state, _ = handle(state, message)

    def run_decide() -> None:
        for state, message, _ in decided:
            decide(state, message)

    def run_seal() -> None:
        for state, message, evs in decided:
            if evs:
                seal(
                    tenant=state.tenant,
                    tx_id=state.tx_id,
                    last_seq=state.seq,
                    last_hash=state.last_hash,
                    events=evs,
                    causation_id=message.message_id,
                    occurred_at=T0,
                )

    def run_evolve() -> None:
        for state, _, evs in decided:
            for event in evs:
                state = evolve(state, event)

    def run_record() -> None:
        for state, envelopes in sealed:
            for envelope in envelopes:
                state = record(state, envelope)

    def run_write() -> None:
        for envelopes, kept in written:
            for envelope in envelopes:
                envelope.model_dump_json()
            kept.model_dump_json()

    def run_jcs() -> None:
        for body in bodies:
            jcs(body)

    def run_rfc8785() -> None:
        for body in bodies:
            rfc8785.dumps(body)

    def run_marker() -> None:
        for marker in finished:
            finish(revive(marker))

    consumed_inputs = sum(len(i) for i in transactions)
    consumed = SimpleNamespace(headers=[], topic="recon.commands", partition=0, offset=0)

    def run_consume() -> None:
        for _ in range(consumed_inputs):
            with tracing.consuming("decider.decide", consumed, "recon-decider"):
                pass

    print(
        f"{args.transactions} README transactions, {events / args.transactions:.1f} events "
        f"each; microseconds per event, best of {args.rounds} rounds"
    )
    total = 0.0
    for name, work in [
        ("handle", run_handle),
        ("decide", run_decide),
        ("seal", run_seal),
        ("evolve", run_evolve),
        ("record", run_record),
        ("write", run_write),
        ("jcs", run_jcs),
        ("rfc8785", run_rfc8785),
    ]:
        us = _best_us(work, events, args.rounds)
        if name == "handle":
            total = us
        print(f"  {name:<8} {us:8.2f}")
    marker_us = _best_us(run_marker, len(finished), args.rounds)
    print(f"  {'marker':<8} {marker_us:8.2f} per finished state ({len(finished)})")
    consume_us = _best_us(run_consume, consumed_inputs, args.rounds)
    each = consumed_inputs / args.transactions
    print(f"  {'consume':<8} {consume_us:8.2f} per input ({each:.1f} each)")
    print(f"handle per transaction: {total * events / args.transactions / 1000:.3f} ms")


if __name__ == "__main__":
    main()
