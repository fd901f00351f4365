"""A decider that cannot restore a partition must not keep it assigned and unserved: every
transaction on it would stall with nothing to show. It stops, loudly, and leaves the
group (whose members the intake's /healthz checks)."""

from pathlib import Path

from aiokafka import AIOKafkaProducer
from support.decider_support import eventually, lone_decider

from events.keys import partition_key
from events.topics import Topics
from services.kafka_setup import ensure_topics


async def test_an_unreadable_changelog_record_stops_the_decider_instead_of_stalling_the_partition(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    topics = Topics(topic_prefix)
    await ensure_topics(kafka_bootstrap, topics)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(
            topics.decider_state,
            key=partition_key("demo", "tx-9"),
            value=b'{"tenant": "demo", "tx_id": "tx-9", "status": "runn',  # cut short
            partition=1,
        )
    finally:
        await producer.stop()

    async with lone_decider(kafka_bootstrap, topic_prefix, tmp_path) as stack:
        decider = stack.processes["decider"]

        async def exited() -> int | None:
            return decider.poll()

        code = await eventually(exited, "the decider stops on a partition it cannot restore")
        log = stack.log_tail("decider", 400)
    assert code != 0, log
    assert "cannot take partition 1" in log, log
    assert "CorruptChangelog" in log and "recon.decider-state:1@0" in log, log
    assert "LeaveGroup request succeeded" in log, log  # its partitions go to the others
