"""A consumer's topic list changed while a periodic metadata refresh is on the wire does not
leave its metadata waiters waiting until the next periodic refresh.

aiokafka's metadata task goes back to its waiter to refresh again when the list changed
during a refresh, but during a *periodic* refresh nobody sets that waiter
(services/kafka_metadata_wakeup.py). A real broker; the client's Metadata request is held
back 0.5 s (a slow broker; in production the window is one round trip every
metadata_max_age_ms) so that the list can be changed while it is on the wire. Both changes
a group leader makes at an assignment (`set_topics` of its members' subscriptions, then
`_maybe_wait_metadata`, group_coordinator.py:448-452): a topic added (a member subscribed to
a new tenant's intents topic) and a topic dropped (that member gone). The client's
metadata_max_age_ms is 6 s here, recon's is 300 s: the stall without the mend is what is
left of it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka.client import AIOKafkaClient
from support.topic_setup import create_topic

from services import kafka_metadata_wakeup

MAX_AGE_MS = 6000
SLOW_S = 0.5  # how long each Metadata request is held back


def _slowed(client: AIOKafkaClient, periodic: asyncio.Event) -> None:
    """Hold every metadata refresh of `client` back SLOW_S; `periodic` is set when one
    starts that nobody asked for (the waiter timed out: unset)."""
    update = client._metadata_update

    async def slow_update(cluster: Any, topics: Any) -> Any:
        if not client._md_update_waiter.done():
            periodic.set()
        await asyncio.sleep(SLOW_S)
        return await update(cluster, topics)

    client._metadata_update = slow_update


async def _wait_after_a_change_in_a_periodic_refresh(
    bootstrap: str, before: list[str], after: list[str]
) -> float:
    """Seconds the leader's metadata wait took after `set_topics(after)` in a periodic
    refresh (capped at 3 * MAX_AGE_MS)."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, metadata_max_age_ms=MAX_AGE_MS)
    await client.bootstrap()
    try:
        await asyncio.wait_for(client.set_topics(before), 10)
        periodic = asyncio.Event()
        _slowed(client, periodic)
        await asyncio.wait_for(periodic.wait(), MAX_AGE_MS / 1000 + 5)
        assert client._md_update_fut is not None, "no refresh on the wire: window not staged"
        started = time.monotonic()
        asked = client.set_topics(after)  # as the group leader's _perform_assignment
        waits: list[Callable[[], Awaitable[Any]]] = [lambda: asked, client._maybe_wait_metadata]
        for wait in waits:
            try:
                await asyncio.wait_for(wait(), 3 * MAX_AGE_MS / 1000)
            except TimeoutError:
                break
        took = time.monotonic() - started
        missing = set(after) - client.cluster.topics()
        assert not missing, f"metadata without {missing} after the wait"
        return took
    finally:
        await client.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("change", ["topic_added", "topic_dropped"])
def test_a_topic_list_changed_in_a_periodic_refresh_is_refreshed_at_once(
    kafka_bootstrap: str, topic_prefix: str, change: str
) -> None:
    kafka_metadata_wakeup.install()  # as services.event_loop does before it runs any loop
    a, b = f"{topic_prefix}a", f"{topic_prefix}b"

    async def main() -> float:
        await create_topic(kafka_bootstrap, a, 1)
        await create_topic(kafka_bootstrap, b, 1)
        before, after = ([a], [a, b]) if change == "topic_added" else ([a, b], [a])
        return await _wait_after_a_change_in_a_periodic_refresh(kafka_bootstrap, before, after)

    took = asyncio.run(main())
    # With the mend: the refresh on the wire, then one more (2 * SLOW_S and round trips).
    # Without it the second waits for the next periodic refresh, MAX_AGE_MS later.
    assert took < 4 * SLOW_S, f"metadata waited {took:.1f} s: the change's refresh was lost"
