"""A worker `audit verify --workers` spawns runs aiokafka mended (services/kafka_mends.py).

A spawned worker imports only what its pool's functions need (services.cli.audit_verify),
not the CLI's entry: the place each entry point's own install once missed, which a
clean-clone CI run met as a worker's consumer stop raising CancelledError (aiokafka issue
#647: services/kafka_consumer_stop.py). The worker is audit verify's own pool; in it, a
consumer on the suite's broker is stopped right after its start, which unmended aiokafka
does not survive, and the mend no stop can show (the metadata wake-up: tests/fault/
test_kafka_metadata_wakeup.py) is looked for.
"""

import asyncio

import pytest
from support.consumer_stopped_at_once import stop_after_start
from support.topic_setup import create_topic

from services import kafka_mends
from services.cli import audit_verify


@pytest.mark.timeout(120)
def test_a_spawned_audit_worker_runs_mended_aiokafka(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    topic = f"{topic_prefix}worker"
    asyncio.run(create_topic(kafka_bootstrap, topic, 1))
    pool, _ = audit_verify.worker_pool(1)
    with pool:  # one worker: both calls run in the same process
        stopped = pool.submit(stop_after_start, kafka_bootstrap, topic).result(timeout=90)
        assert stopped == "stopped, 0 connections left open", f"in the worker: {stopped}"
        assert pool.submit(kafka_mends.mended).result(timeout=30), "aiokafka unmended"
