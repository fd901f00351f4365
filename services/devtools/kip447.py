"""KIP-447's fenced offset commit for aiokafka, for measuring only: `TxnOffsetCommit` v3.

aiokafka 0.14 commits a transaction's offsets with `TxnOffsetCommit` v0, which names no
consumer group generation, so a producer shared by the partitions of one process cannot be
fenced by the group the way Kafka's Java clients fence one (KIP-447): the broker's group
coordinator refuses a v3 commit whose generation or member is no longer the group's, and the
transaction it belongs to then cannot commit. That is why the decider has a transactional
producer per partition (services/decider/runtime.py). This module adds v3 (a flexible
version: compact strings and arrays, tagged fields) on aiokafka's own protocol types, and a
handler for its answer that reads a refused generation as a fence, so that
services.devtools.txn_streams can measure what one fenced transaction per process would
cost before anyone builds it. Nothing in recon's services imports it.

`with fenced_offset_commits(generation):` swaps aiokafka's request and handler in for the
commits made inside it; the generation is read each time a commit is built, from the
consumer whose membership fences it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import aiokafka.producer.sender as aiokafka_sender
from aiokafka.errors import ProducerFenced
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.transaction import TxnOffsetCommitRequest_v0
from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

# The group coordinator's answers that say the committing member is not the group's current
# one (a zombie): ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID.
NOT_THE_GROUPS_MEMBER = {22, 25, 82}


class TxnOffsetCommitResponse_v3(Response):  # type: ignore[misc]
    API_KEY = 28
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "errors",
            CompactArray(
                ("topic", CompactString("utf-8")),
                (
                    "partition_errors",
                    CompactArray(
                        ("partition", Int32), ("error_code", Int16), ("tags", TaggedFields)
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class TxnOffsetCommitRequest_v3(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 28
    API_VERSION = 3
    RESPONSE_TYPE = TxnOffsetCommitResponse_v3
    SCHEMA = Schema(
        ("transactional_id", CompactString("utf-8")),
        ("group_id", CompactString("utf-8")),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("generation_id", Int32),
        ("member_id", CompactString("utf-8")),
        ("group_instance_id", CompactString("utf-8")),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("committed_metadata", CompactString("utf-8")),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


Generation = Callable[[], tuple[int, str]]  # (generation id, member id) of the fencing member

_generation: Generation | None = None
_V0_ANSWER = aiokafka_sender.TxnOffsetCommitHandler.handle_response


class FencedTxnOffsetCommit(Request[TxnOffsetCommitRequest_v0 | TxnOffsetCommitRequest_v3]):  # type: ignore[misc]
    """aiokafka's TxnOffsetCommitRequest with the fencing member's generation: v3 only."""

    API_KEY = 28

    def __init__(
        self,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        topics: list[tuple[str, list[tuple[int, int, str]]]],
    ) -> None:
        self.fields = (transactional_id, group_id, producer_id, producer_epoch, topics)

    def build(self, request_struct_class: Any) -> Any:
        if request_struct_class.API_VERSION < 3 or _generation is None:
            raise RuntimeError("no TxnOffsetCommit v3 from this broker, or no generation to send")
        transactional_id, group_id, producer_id, epoch, topics = self.fields
        generation_id, member_id = _generation()
        return request_struct_class(
            transactional_id,
            group_id,
            producer_id,
            epoch,
            generation_id,
            member_id,
            None,
            [
                (topic, [(p, offset, -1, meta, {}) for p, offset, meta in parts], {})
                for topic, parts in topics
            ],
            {},
        )


def _handle_response(self: Any, resp: Any) -> Any:
    codes = [code for _, parts, _ in resp.errors for _, code, _ in parts]
    if any(code in NOT_THE_GROUPS_MEMBER for code in codes):
        # aiokafka reads these as unexpected and fails the producer for good; KIP-447 makes
        # them a fence: this member's transaction may not commit.
        raise ProducerFenced()
    plain = [(topic, [(p, code) for p, code, _ in parts]) for topic, parts, _ in resp.errors]
    return _V0_ANSWER(self, _V0Answer(plain))


@contextmanager
def fenced_offset_commits(generation: Generation) -> Iterator[None]:
    """Inside, this process's transactional offset commits are v3, carrying `generation()`
    (read as each commit is built); a broker without v3 is refused, never sent v0 unfenced.
    aiokafka's own request and handler are back on exit (other code in the process, a test
    of the decider's earlier offsets, commits with v0)."""
    global _generation
    handler = aiokafka_sender.TxnOffsetCommitHandler
    request, answer = aiokafka_sender.TxnOffsetCommitRequest, handler.handle_response
    _generation = generation
    aiokafka_sender.TxnOffsetCommitRequest = FencedTxnOffsetCommit
    handler.handle_response = _handle_response
    try:
        yield
    finally:
        aiokafka_sender.TxnOffsetCommitRequest = request
        handler.handle_response = answer
        _generation = None


class _V0Answer:
    """A v3 answer in v0's shape, for aiokafka's own handling of every other error."""

    def __init__(self, errors: list[tuple[str, list[tuple[int, int]]]]) -> None:
        self.errors = errors
