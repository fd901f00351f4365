"""A fence reads as a fence whichever way the decider meets it (Decider.drop, _recover).

A decider frozen past its group session (a long pause, a suspended VM) wakes to two things
at once: its consumer learns it left the group and revokes its partitions, and its open
transaction's commit is refused because a successor fenced the transactional id. When the
revocation reaches the partition first, the transaction's failure arrives through `drop`,
not `_recover`; the operator (and tests/fault/test_decider_crash.py) must still read that
this decider was fenced, not that some transaction failed.
"""

import asyncio
import logging
import time

import pytest
from aiokafka.errors import KafkaConnectionError, ProducerFenced

from events.topics import Topics
from services.config import Settings
from services.decider.runtime import Decider, OwnedPartition


class _NoneFinished:
    async def get(self, key: bytes) -> None:
        return None


async def _fails(error: BaseException) -> None:
    raise error


async def _dropped_with(error: BaseException, caplog: pytest.LogCaptureFixture) -> str:
    settings = Settings(
        kafka_bootstrap="127.0.0.1:9", database_url="", topics=Topics(""), environment="test"
    )
    decider = Decider(settings)
    try:
        owned = OwnedPartition(None, {}, _NoneFinished())  # type: ignore[arg-type]
        owned.task_began = time.monotonic()  # as Decider._start does
        owned.task = asyncio.create_task(_fails(error))
        decider.owned = {3: owned}
        with caplog.at_level(logging.INFO, logger="services.decider.runtime"):
            await decider.drop(3)
        assert 3 not in decider.owned
        return caplog.text
    finally:
        await decider.stop_clients()


async def test_a_fenced_transaction_of_a_partition_being_dropped_is_logged_as_a_fence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = await _dropped_with(ProducerFenced(), caplog)
    assert "fenced on partition 3: another decider owns it now" in text


async def test_any_other_failure_of_a_partition_being_dropped_is_not_called_a_fence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = await _dropped_with(KafkaConnectionError(), caplog)
    assert "fenced" not in text
    assert "transaction of dropped partition 3 failed (KafkaConnectionError" in text
