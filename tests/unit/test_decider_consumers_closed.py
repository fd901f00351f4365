"""The decider's own consumers (the changelog reader, a partition's restore) are closed
however they end: one made and never stopped is logged at ERROR ("Unclosed
AIOKafkaConsumer") when it is collected, which an operator reads as a fault at every clean
stop of a decider that never read a marker back."""

import asyncio
import gc

import pytest
from aiokafka.errors import KafkaConnectionError

from services.decider.finished_index import ChangelogReader
from services.decider.restore import restore_partition

NOBODY = "127.0.0.1:9"  # nothing listens: a start fails at once


async def _collected(caplog: pytest.LogCaptureFixture) -> str:
    gc.collect()
    await asyncio.sleep(0)  # the loop's exception handler runs the report
    return caplog.text


async def test_a_changelog_reader_that_never_read_closes_its_consumer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = ChangelogReader(NOBODY, "recon.decider-state")
    await reader.stop()
    del reader
    assert "Unclosed AIOKafkaConsumer" not in await _collected(caplog)


async def test_a_restore_whose_start_failed_closes_its_consumer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(KafkaConnectionError):
        await restore_partition(NOBODY, "recon.decider-state", 0)
    assert "Unclosed AIOKafkaConsumer" not in await _collected(caplog)
