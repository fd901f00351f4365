"""The decider links each partition's checkpoints (prev_checkpoint names the record before,
docs/receipts.md#links-between-checkpoints) and starts a new chain when it takes the
partition again; `audit verify` trusts a linked checkpoint through its successor's
signature, yet a checkpoint altered in any byte (its head, its signature, its link) is
still INVALID at its own place, and a log of checkpoints without links, or with a link
broken, is still VALID. The altered logs are copies of what the real decider wrote."""

import os
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer
from support.checkpoint_edits import ALTERATIONS, edited, unlinked
from support.decider_support import event_types, eventually, lone_decider, produce
from support.topic_records import Record, read_records
from support.txbuilders import observed, submit
from test_audit import cli

from events.checkpoint import record_digest
from events.inputs import DeciderInput, Outcome
from events.topics import Topics
from services.kafka_setup import ensure_topics

PARTITION = 0


async def _commit(bootstrap: str, topics: Topics, tx_ids: list[str]) -> None:
    """One-step transactions through the decider to their commit (its end is signed)."""
    await produce(bootstrap, topics.commands, [submit(["a"], tx_id=t) for t in tx_ids], PARTITION)

    async def dispatched() -> bool | None:
        types = [await event_types(bootstrap, topics, t) for t in tx_ids]
        return True if all("OperationDispatched" in t for t in types) else None

    await eventually(dispatched, f"{tx_ids} dispatched")
    answers: list[DeciderInput] = [observed("a", 1, Outcome.SUCCEEDED, tx_id=t) for t in tx_ids]
    await produce(bootstrap, topics.observations, answers, PARTITION)

    async def committed() -> bool | None:
        types = [await event_types(bootstrap, topics, t) for t in tx_ids]
        return True if all("TransactionCommitted" in t for t in types) else None

    await eventually(committed, f"{tx_ids} committed")


async def _copy(
    bootstrap: str, prefix: str, events: list[Record], checkpoints: list[bytes]
) -> dict[str, str]:
    """The events and these checkpoint records on a log of their own; its CLI env."""
    topics = Topics(prefix)
    await ensure_topics(bootstrap, topics)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for r in events:
            await producer.send(topics.events, r.value, r.key, partition=r.partition)
        for value in checkpoints:
            await producer.send(topics.checkpoints, value, partition=PARTITION)
        await producer.flush()
    finally:
        await producer.stop()
    return {**os.environ, "RECON_KAFKA_BOOTSTRAP": bootstrap, "RECON_TOPIC_PREFIX": prefix}


async def test_linked_checkpoints_verify_and_any_altered_one_is_still_invalid(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    before, after = [f"link-{i}" for i in range(6)], ["after-0", "after-1"]
    async with lone_decider(kafka_bootstrap, topic_prefix, tmp_path) as stack:
        # One after the other: each commit is a Kafka transaction of its own, signed.
        for tx_id in before:
            await _commit(kafka_bootstrap, topics, [tx_id])
        stack.kill("decider")  # a new decider takes the partition: a new chain
        stack.start("decider")
        for tx_id in after:  # likewise: two answers fetched together share one transaction
            await _commit(kafka_bootstrap, topics, [tx_id])
    found = await read_records(kafka_bootstrap, topics.checkpoints)
    values = [r.value for r in found if r.partition == PARTITION and r.value is not None]
    assert len(found) == len(values) >= len(before) + len(after), found
    links = [orjson.loads(v).get("prev_checkpoint") for v in values]
    # Every checkpoint names the record before it, but the first of each decider's run
    # (two runs, or more should a rebalance have made the first take it again).
    starts = [n for n, link in enumerate(links) if link is None]
    assert starts[0] == 0 and len(starts) >= 2, links
    assert starts[1] > 5, links  # the altered ones below are all in the first run
    for n, link in enumerate(links):
        if link is not None:
            assert link == record_digest(values[n - 1]), n
    events = await read_records(kafka_bootstrap, topics.events)

    env = await _copy(kafka_bootstrap, f"{topic_prefix}faithful.", events, values)
    code, out, err = await cli(env, "audit", "verify")
    assert code == 0 and out.strip().endswith("VALID"), (out, err)
    assert f"; {len(before) + len(after)} transactions signed;" in out, out

    # Three earlier checkpoints of the first run altered, each followed by an intact one
    # whose signature holds and whose link no longer names it.
    tampered = list(values)
    for n, change in zip((0, 2, 4), ALTERATIONS, strict=True):
        tampered[n] = edited(tampered[n], change)
    env = await _copy(kafka_bootstrap, f"{topic_prefix}tampered.", events, tampered)
    code, out, err = await cli(env, "audit", "verify")
    assert code == 1 and out.strip().endswith("INVALID"), (out, err)
    kid = orjson.loads(values[0])["key_id"]
    copied = Topics(f"{topic_prefix}tampered.").checkpoints
    assert [line for line in out.splitlines() if line.startswith("PROBLEM")] == [
        f"PROBLEM {copied}[{PARTITION}]@{n}: the signature does not hold under key {kid}"
        for n in (0, 2, 4)
    ], out

    # Checkpoints from before links, and a chain broken by a checkpoint gone: each one no
    # trusted successor names is checked by its signature, and the log stays VALID.
    env = await _copy(kafka_bootstrap, f"{topic_prefix}old.", events, [unlinked(v) for v in values])
    code, out, err = await cli(env, "audit", "verify")
    assert code == 0 and out.strip().endswith("VALID"), (out, err)
    assert f"; {len(before) + len(after)} transactions signed;" in out, out
    gap = values[:1] + values[2:]
    env = await _copy(kafka_bootstrap, f"{topic_prefix}gap.", events, gap)
    code, out, err = await cli(env, "audit", "verify")
    assert code == 0 and out.strip().endswith("VALID") and "PROBLEM" not in out, (out, err)
