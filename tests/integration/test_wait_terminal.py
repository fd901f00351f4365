"""Recon.wait_terminal against the projection it reads (support.settled): a transaction whose
commit is projected before its receipt's dispatch is not over.

The decider commits and dispatches the on_commit receipt in one Kafka transaction, but the
projector writes a batch per fetch, and a fetch may end between the two records (its 1000
records, or a fetch's bytes, under a backlog), then waits RECON_READER_BATCH_WAIT_MS before
the next. The test makes that boundary itself: with the projector stopped, it projects the
log up to the commit through the projector's own writer (projections.writer.project_batch),
as the projector's batch would, then lets the projector go on from the offsets stored with
those rows. The receipt is held at the provider meanwhile, so nothing of it is there by luck.
"""

import asyncio
import time

import asyncpg
from support.recon_client import Recon, effects_for, op, transaction
from support.topic_records import read_records

from events.topics import Topics
from projections.decode import decode_event
from projections.writer import Record, project_batch
from services.devtools.stack import Stack

TX = "split-1"


async def test_a_commit_projected_before_its_receipt_was_sent_is_not_the_end(
    stack: Stack, recon: Recon
) -> None:
    stack.stop("projector")
    # Under the stack's 2 s provider timeout: the receipt is answered, late.
    await recon.arm("email.send", "delay", delay_ms=1500)
    assert (await recon.submit(transaction(TX))).status_code == 202

    topic = Topics(stack.topic_prefix).events
    upto_commit: list[Record] = []
    deadline = time.monotonic() + 60
    while not upto_commit or upto_commit[-1][2].type != "TransactionCommitted":
        assert time.monotonic() < deadline, f"{TX} not committed on the log: {upto_commit}"
        await asyncio.sleep(0.1)
        upto_commit = []
        for record in await read_records(stack.kafka_bootstrap, topic):
            decoded = decode_event(record.value)
            assert not isinstance(decoded, str), decoded
            upto_commit.append((record.partition, record.offset, decoded[0]))
            if decoded[0].type == "TransactionCommitted":
                break
    conn = await asyncpg.connect(stack.database_url)
    try:
        await project_batch(conn, topic, upto_commit)
    finally:
        await conn.close()

    split = (await recon.get(TX)).json()
    assert (split["status"], op(split, "receipt")["state"]) == ("committed", "pending"), split

    stack.start("projector")
    tx = await recon.wait_terminal(TX)
    # What test_end_to_end's first test counts once its wait returns: on the split view
    # the email is not at the provider yet, and the receipt is pending.
    receipt = op(tx, "receipt")
    assert len(effects_for(await recon.effects(), receipt["op_key"])) == 1, tx
    assert (tx["status"], receipt["state"]) == ("committed", "confirmed"), tx
