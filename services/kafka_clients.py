"""How recon's processes read from and write to Kafka: one declared policy each, instead
of settings repeated (and drifting) in every runtime.

Reading: a consumer-group member sees only records of committed Kafka transactions (an
aborted decision must never be acted on) and commits its own position, after its work is
durable. Writing: idempotent and acknowledged by every in-sync replica, so a record that
was acknowledged survives a broker restart and a retried send is not duplicated.
"""

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)

from services import kafka_security
from services.config import Settings
from services.metrics import CONSUMER_GROUP_PROCESSES, CONSUMER_LAG, labelled

log = logging.getLogger(__name__)

# How long fetched records may wait to be taken before aiokafka fetches the other partitions
# of their broker without them (its default: 100 ms, not a constructor option). One
# connection carries one fetch at a time, so a record arriving meanwhile on the partition
# left out (a transaction's next observation, its next dispatch) waited until that fetch
# ended: up to fetch_max_wait_ms, 500 ms, the p99 of 202 -> commit at no load. recon's
# consumers take every fetched partition on each getmany, so records wait only while the
# previous batch is handled, well under a second: the next fetch follows at once, with
# every partition in it. Not longer: the same timer is aiokafka's only way out of a lost
# wake-up in its fetch loop (a seek during a rebalance listener, while a fetched record
# waits, left a reset unsent): at 30 s a decider sat out its own session and a first
# transaction waited 30 s (seen in CI; tests/integration/test_consumer_fetch_wait.py).
# Shortening fetch_max_wait_ms instead (10 ms) cured the wait too, but at 4x the idle CPU
# (an empty fetch every 10 ms per member, in Kafka and in each process).
PREFETCH_BACKOFF_S = 1.0


def client_id(role: str) -> str:
    """The id a client of recon tells the broker: `recon-`, its process and its role
    (`recon-decider-inputs`, `recon-intake-producer`, ...). The broker's request log, its
    metrics and its quotas name clients by it, so an operator tells recon's processes apart
    (docs/operations.md#kafka-client-ids; aiokafka's default named only its own version).
    The same in every deployment and instance: it carries no secret, tenant or host."""
    return f"recon-{role}"


def connection(bootstrap: str, role: str) -> dict[str, Any]:
    """Where Kafka is, how to log in to it (services.kafka_security) and who is asking:
    the arguments every aiokafka client of recon is built with, consumer, producer or
    admin."""
    return {
        "bootstrap_servers": bootstrap,
        "client_id": client_id(role),
        **kafka_security.configured().client_options(),
    }


class GroupConsumer(AIOKafkaConsumer):  # type: ignore[misc]
    async def start(self) -> None:
        await super().start()
        # The Fetcher exists from start() on and reads this for every result it stores.
        # aiokafka is pinned (uv.lock); tests/integration/test_consumer_fetch_wait.py
        # fails if an upgrade renames or ignores it.
        self._fetcher._prefetch_backoff = PREFETCH_BACKOFF_S
        # This process runs a member of the group: summed over the processes Prometheus
        # scrapes, the members the group should have (ReconConsumerGroupMemberMissing
        # compares it with the members its coordinator lists).
        labelled(CONSUMER_GROUP_PROCESSES, self._group_id).set(1)

    async def stop(self) -> None:
        labelled(CONSUMER_GROUP_PROCESSES, self._group_id).set(0)
        await super().stop()

    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        super().subscribe(
            topics, pattern=pattern, listener=_LagHandedOver(self._group_id, listener)
        )


class _LagHandedOver(ConsumerRebalanceListener):  # type: ignore[misc]
    """A revoked partition's recon_consumer_lag is set to 0 here, after the runtime's own
    listener: the lag is set by the consumer that fetches the partition (services.metrics.
    observe_lag), so a partition this process no longer reads kept its last value in its
    /metrics for the process's life, beside the new owner's. A backlog when partitions
    moved (scaling out, ReconConsumerLagging's own remedy) kept that alert firing after the
    backlog was gone (tests/integration/test_consumer_lag_revoked.py)."""

    def __init__(self, group: str, inner: ConsumerRebalanceListener | None) -> None:
        self._group, self._inner = group, inner

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if self._inner is not None:
            await self._inner.on_partitions_revoked(revoked)
        for tp in revoked:
            labelled(CONSUMER_LAG, self._group, tp.topic, str(tp.partition)).set(0)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if self._inner is not None:
            await self._inner.on_partitions_assigned(assigned)


# A dead member's partitions move on after 10 s, not the 45 s default; the intake's group
# watch (services.intake.group_watch) calls a group stalled once it has gone this long
# without a settled assignment, the time the broker allows a silent member.
SESSION_TIMEOUT_MS = 10000


def group_consumer(settings: Settings, group: str, role: str, **overrides: Any) -> AIOKafkaConsumer:
    options: dict[str, Any] = {
        **connection(settings.kafka_bootstrap, role),
        "group_id": f"{settings.group_prefix}{group}",
        "isolation_level": "read_committed",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "heartbeat_interval_ms": 2000,
    }
    return GroupConsumer(**(options | overrides))


def acked_producer(settings: Settings, role: str, **overrides: Any) -> AIOKafkaProducer:
    options: dict[str, Any] = {
        **connection(settings.kafka_bootstrap, role),
        "enable_idempotence": True,
        "acks": "all",
    }
    return AIOKafkaProducer(**(options | overrides))


async def start_or_stop(client: AIOKafkaConsumer | AIOKafkaProducer) -> None:
    """Starts `client`; a start that fails or is cancelled stops it before the error goes on.

    aiokafka's `start()` opens the bootstrap connection and the metadata task, then (a
    consumer) the fetcher's and the coordinator's, one after another, and keeps what it
    opened when a later step fails or the start is cancelled. A caller that keeps a client
    only once it has started dropped such a one unstopped, its tasks and connections left for
    the life of the process: the intake's group watch, its offsets reader's start cut off by
    the watch's timeout or by the intake stopping (seen as `Unclosed AIOKafkaConsumer` at the
    end of the suite's runs; tests/unit/test_kafka_start_or_stop.py). Not for a client
    started again after a failure (services.kafka_start): a stopped client cannot start."""
    try:
        await client.start()
    except BaseException:
        await stop_client(client)
        raise


# A producer's clean stop delivers what is queued first: milliseconds from a broker that
# answers. recon waits for the acknowledgement of every record it relies on (a 2xx, an
# offset committed, a transaction), so what a stop past this gives up was answered to
# nobody: its sender retries the same way a crash would have it sent again.
PRODUCER_STOP_S = 5.0


async def stop_producer(producer: AIOKafkaProducer, timeout: float = PRODUCER_STOP_S) -> None:
    """Stops `producer` within about `timeout` s, its sender task and connections with it.

    aiokafka's `stop()` first waits for every queued batch to be delivered, and a producer
    whose sender is stuck never delivers them (a transaction the decider gave up at its
    deadline: docs/decider.md; a retried produce waiting for a metadata refresh that never
    comes: docs/operations.md, "Known limits of the Kafka client"). Cut off there, `stop()`
    left the sender task running and the connections open for the life of the process. Past
    `timeout` the sender task is cancelled (`_cancelled`), what is still queued fails (so
    that nothing waits on it), and the client closes.
    """
    try:
        await asyncio.wait_for(producer.stop(), timeout)
        return
    except TimeoutError:
        pass
    except asyncio.CancelledError:
        # The caller gave the stop up (a timeout around it, a stop of its own): wait_for
        # cancelled aiokafka's stop after it had marked the producer closed, so no later
        # stop would reach the sender, which ran on with its connections to the loop's end
        # (whose single cancel a sender may outlive: _cancelled). Torn down as at the bound,
        # shielded, as stop_consumer's cancelled caller.
        log.warning(
            "Kafka producer %s: its stop cancelled; its records still queued fail "
            "undelivered, its sender cancelled, its connections closed",
            producer.client._client_id,
        )
        await asyncio.shield(asyncio.ensure_future(_producer_torn_down(producer)))
        raise
    log.warning(
        "Kafka producer %s not stopped within %.1f s (the broker does not answer): its "
        "records still queued fail undelivered, its sender cancelled, its connections closed",
        producer.client._client_id,
        timeout,
    )
    await _producer_torn_down(producer)


async def _producer_torn_down(producer: AIOKafkaProducer) -> None:
    """What aiokafka's `producer.stop()` has not reached, done without the broker."""
    await _cancelled(producer._sender.sender_task)
    producer._message_accumulator.fail_all(KafkaError("the producer was stopped undelivered"))
    await producer.client.close()


# A consumer's clean stop (its group left, its fetches cancelled, its connections closed)
# takes milliseconds from a broker that answers. Each consumer of a process is stopped in
# turn, so a few of these still end well within an orchestrator's grace period (30 s).
CONSUMER_STOP_S = 5.0


async def stop_consumer(consumer: AIOKafkaConsumer, timeout: float = CONSUMER_STOP_S) -> None:
    """Stops `consumer` within about `timeout` s, its tasks and connections with it.

    aiokafka's `stop()` lets the group coordinator's routine finish the request it has in
    flight, then sends LeaveGroup and waits for its answer: from a broker that takes
    requests and answers none (frozen, behind a firewall that drops packets) that is
    `request_timeout_ms` (40 s) each, 79 s seen for one consumer, and a process stops its
    consumers one after another. Past `timeout` what `stop()` has not reached is done here:
    the coordinator's tasks cancelled (twice if need be, as a producer's sender), the
    fetcher closed (services.kafka_consumer_stop) and the client's connections and metadata
    task closed. `stop()` marks the consumer closed first, so a later stop does nothing.

    What the broker sees then: no LeaveGroup, so the member stays in the group until its
    session times out (SESSION_TIMEOUT_MS), and its partitions move on then instead of at
    once. No offset is lost: recon commits offsets only in Kafka transactions or by explicit
    commits, each before the stop (auto-commit is off: aiokafka's last commit at close
    commits nothing). A rebalance listener the coordinator was running is cancelled with
    it: a transaction it had open is aborted by the broker at its timeout.
    """
    # Not wait_for: on its timeout it waits for the cancelled stop to end, and a stop that
    # takes its cancellation as a request's failure goes on waiting.
    stopping = asyncio.ensure_future(consumer.stop())
    try:
        await asyncio.wait({stopping}, timeout=timeout)
    except asyncio.CancelledError:
        # The caller gave the stop up (its own task cancelled: a timeout around it, a stop
        # of its own): the inner stop is cut off as at the timeout, not left waiting on a
        # broker that answers nothing, 40 s a request, behind everyone's back, up to the
        # loop's end, which cancels what is left and waits for it (asyncio.run), so the
        # process outlived its stop. Shielded: a second cancel of the caller leaves the
        # tear-down, itself bounded (_cancelled), to end on its own.
        if not stopping.done():
            log.warning(
                "Kafka consumer %s: its stop cancelled; its tasks cancelled, its connections "
                "closed; the group drops it at its session timeout",
                consumer._client._client_id,
            )
            await asyncio.shield(asyncio.ensure_future(_torn_down(consumer, stopping)))
        raise
    if stopping.done():
        stopping.result()
        return
    log.warning(
        "Kafka consumer %s not stopped within %.1f s (the broker does not answer): its "
        "tasks cancelled, its connections closed; the group drops it at its session timeout",
        consumer._client._client_id,
        timeout,
    )
    await _torn_down(consumer, stopping)


async def _torn_down(consumer: AIOKafkaConsumer, stopping: "asyncio.Future[None]") -> None:
    """What `consumer.stop()` (`stopping`) has not reached, done without the broker."""
    await _cancelled(stopping)
    coordinator = consumer._coordinator
    for name in ("_coordination_task", "_heartbeat_task", "_commit_refresh_task"):
        await _cancelled(getattr(coordinator, name, None))
    if consumer._fetcher is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(consumer._fetcher.close(), 1.0)
    await consumer._client.close()


async def stop_client(client: AIOKafkaConsumer | AIOKafkaProducer | AIOKafkaAdminClient) -> None:
    """Stops any Kafka client recon makes on its kind's bounded stop. An admin client has
    nothing to flush or leave: its close only cancels its metadata task and closes its
    connections, which waits on no broker."""
    if isinstance(client, AIOKafkaAdminClient):
        await client.close()
    elif isinstance(client, AIOKafkaConsumer):
        await stop_consumer(client)
    else:
        await stop_producer(client)


async def _cancelled(task: "asyncio.Future[Any] | None") -> None:
    """Cancels `task` and waits for it to end, a second time if need be: a task cancelled
    once may wait for its requests in flight, and one stuck like that never ends, while
    the second cancel reaches it. Given up after a second each: the task is then left."""
    for _ in range(2):
        if task is None or task.done():
            return
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)


# Refusals that sending the same record again cannot cure (its size). Errors that may pass
# (a broker away, a timeout, a leader moving) are not listed: their callers retry.
RECORD_REFUSED: tuple[type[KafkaError], ...] = (
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
)


def transaction_failure(producer: AIOKafkaProducer) -> BaseException | None:
    """The error that moved a transactional producer to its fatal state, if it is there.

    aiokafka's sender learns of a fence (`ProducerFenced`: another process initialised the
    transactional id) in the background, from whichever request meets it first. Every
    `send` or `send_offsets_to_transaction` after that raises `IllegalOperation("... not in
    transaction")`, which is no KafkaError and names no cause; the cause is only on the
    transaction's waiter. Callers re-raise it, so a fence is handled as a fence, whichever
    call happened to meet it.
    """
    manager = producer._txn_manager
    if manager is None or not manager.is_fatal_error():
        return None
    waiter = manager.wait_for_transaction_end()
    if not waiter.done() or waiter.cancelled():
        return None
    failure: BaseException | None = waiter.exception()
    return failure
