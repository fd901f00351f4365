"""A decider's Kafka transaction that never ends is given up and its partition restored.

Seen in CI (the three-broker kill test): a transaction's produce met a leader killed under
load, retried, and then neither ended nor failed; its partition stalled for good while the
others went on, and every later input of it (the pull reconciler's lookups included) waited
behind it. Here the decider runs in this process against a real broker, its calls off, and
the producers of its first takes never answer a send (a sender stuck that way); producers
made later are whole. Past TRANSACTION_DEADLINE_S (lowered to 2 s) the decider must give the
transaction up, take the partition again with a new producer (which fences the stuck one),
read the input again from the committed offsets and commit its decision, once. Without the
deadline the submission is never decided."""

import asyncio
import gc
import logging
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from support.decider_support import event_types, eventually, in_process, produce
from support.txbuilders import submit

from events.topics import PARTITIONS, Topics
from services.decider import runtime
from services.decider.runtime import Decider

PARTITION = 2
TX = "stuck-1"


@pytest.mark.timeout(180)  # without the deadline the decider's stop waits on it forever
async def test_a_transaction_that_never_ends_is_given_up_and_its_partition_restored(
    kafka_bootstrap: str,
    topic_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topics = Topics(topic_prefix)
    settings = await in_process(kafka_bootstrap, topics)
    monkeypatch.setattr(runtime, "TRANSACTION_DEADLINE_S", 2.0)
    made: list[AIOKafkaProducer] = []
    whole = Decider.transactional_producer

    def first_ones_stuck(self: Decider, partition: int) -> AIOKafkaProducer:
        producer = whole(self, partition)
        made.append(producer)
        if len(made) <= PARTITIONS:  # the first takes' producers: no send ever answers

            async def never(*args: Any, **kwargs: Any) -> Any:
                await asyncio.Event().wait()

            producer.send = never
            producer.send_batch = never
        return producer

    monkeypatch.setattr(Decider, "transactional_producer", first_ones_stuck)
    await produce(kafka_bootstrap, topics.commands, [submit(["a"], tx_id=TX)], PARTITION)

    stop = asyncio.Event()
    decider = Decider(settings)
    running = asyncio.create_task(decider.run(stop))
    try:
        with caplog.at_level(logging.WARNING, logger="services.decider.runtime"):

            async def decided() -> list[str] | None:
                assert not running.done(), running
                return (await event_types(kafka_bootstrap, topics, TX)) or None

            types = await eventually(decided, f"{TX} decided after its stuck transaction", 60)
            await asyncio.sleep(1.0)  # a second decision of it would be on the log by now
            assert await event_types(kafka_bootstrap, topics, TX) == types
            assert types == ["TransactionAccepted", "OperationDispatched"], types
        assert f"transaction on partition {PARTITION} has not ended" in caplog.text
        assert len(made) > PARTITIONS, "the partition was not taken again"
    finally:
        stop.set()
        await asyncio.wait_for(running, 60)
        # As in test_decider_fenced_mid_batch: aiokafka leaves futures of the fenced
        # producers that nobody awaits; collected here, not in the middle of pytest's own work.
        gc.collect()
