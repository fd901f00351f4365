"""Starting a Kafka client at process start-up: a broker that is restarting is waited for, a
configuration that cannot work still stops the process.

Topic set-up (services.kafka_setup.ensure_topics) already waits for Kafka, but a broker can go
down between that and the start of a producer or consumer (found by `make chaos`: a
dispatcher started during a broker restart exited on `KafkaConnectionError` from
`producer.start()`), so the same client is started again after a back-off.

Started again, not made anew: aiokafka (pinned, uv.lock) lets a retriable error out of a
start only before the client keeps anything a second start trips on. A producer's comes
from its bootstrap or its producer id, before its sender task exists; a group consumer's
from its bootstrap or its topics' first metadata, before it makes its fetcher (a second
bootstrap reuses the metadata task the first made). A broker lost once the consumer has
its fetcher and coordinator (refused connections, no coordinator yet) is retried inside
aiokafka's start, which waits for the broker; what still leaves it then is not retriable
(a refused group, an answer aiokafka does not expect) and is raised here at once
(tests/fault/test_kafka_lost_after_consumer_bootstrap.py kills the broker at that moment).
A consumer started again once its fetcher exists ends the process on aiokafka's `assert
self._fetcher is None` ("Did you call `start` twice?"): so not for a consumer without a
group, whose start can raise a retriable UnknownTopicOrPartitionError after its fetcher.

Stopped while it starts: aiokafka watches nothing but the broker inside a start, and waits
there for as long as the broker is away: a broker lost after a group consumer bootstrapped
(above), or one that takes the connection and never answers (frozen, its host gone behind a
firewall that drops packets) for `request_timeout_ms`, 40 s an attempt. So the start races
the caller's `stop`: once it is set the attempt is cancelled and the caller told it did not
start, instead of a process asked to stop sitting out the broker's outage until its
orchestrator kills it. The client is not started again (a cancelled start keeps what it
opened, as a failed one does): the caller stops it, as it stops every client it made
(services.closing, which registers the stop before the start).

Transient or permanent: an error Kafka marks retriable (the broker refuses connections, is
not the leader yet, ...) is retried for `START_TIMEOUT_S`; any other error (a refused
protocol version or authentication, a malformed option) is raised at once. A wrong address
looks exactly like a broker that is down, so only time tells them apart: past the deadline
the last error is raised and the process exits with it.
"""

import asyncio
import logging
from typing import Protocol

from aiokafka.errors import KafkaError

from services.stop_race import retried

log = logging.getLogger(__name__)

# As long as topic set-up waits: a broker restart takes seconds; a minute is a broker that is
# not coming back (or an address that is wrong).
START_TIMEOUT_S = 60.0
START_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)


class Startable(Protocol):
    async def start(self) -> None: ...


async def start_kafka_client(
    client: Startable,
    what: str,
    stop: asyncio.Event | None = None,
    *,
    timeout_s: float | None = None,
) -> bool:
    """Start `client`, retrying retriable Kafka errors with back-off until the deadline.

    Returns False if `stop` was set while waiting or while a start was under way (the
    caller shuts down without having started, and stops the client); raises the error if
    it is not retriable or the deadline passed."""
    started = await retried(
        client.start,
        stop,
        what=f"Kafka {what}",
        transient=lambda error: isinstance(error, KafkaError) and error.retriable,
        timeout_s=START_TIMEOUT_S if timeout_s is None else timeout_s,
        backoff=START_BACKOFF_S,
        log=log,
    )
    if not started:
        log.info("Kafka %s: its start given up, the process is stopping", what)
    return started
