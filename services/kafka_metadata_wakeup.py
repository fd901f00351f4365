"""aiokafka: a consumer's topic list changed during a periodic metadata refresh starts the
next refresh at once, as it does when the change comes between refreshes.

aiokafka (0.14.0, uv.lock) refreshes a client's metadata in one task
(`AIOKafkaClient._md_synchronizer`): it sleeps on a waiter for up to `metadata_max_age_ms`
(300 s: recon keeps aiokafka's default), refreshes, and resolves the future everyone who
asked for a refresh awaits. A refresh asked for (`force_metadata_update`) sets the waiter;
one that times out (the periodic refresh) creates that future itself, before it sends. If
`set_topics` replaces the topic list while such a periodic refresh is on the wire, the task
sees the list changed when the answer comes and goes back to the waiter to refresh again
"right away", but nobody set the waiter: `set_topics` asked for a refresh only if a topic
was added, and then `force_metadata_update` saw the future and left the waiter alone. Until
the next periodic refresh, up to `metadata_max_age_ms` later, the future stays unresolved
and every later `force_metadata_update` returns it without waking the task: whoever awaits
metadata waits (a group leader's assignment, `_maybe_wait_metadata`; a consumer looking for
its coordinator or a partition's new leader). docs/operations.md, "Known limits of the Kafka
client"; tests/fault/test_kafka_metadata_wakeup.py.

Only consumers replace the list (`subscribe`, `assign`, the group leader's union of its
members' subscriptions); a producer adds to it in place, so its refresh never sees a change.

`install()` makes `set_topics` set the waiter when a refresh is in flight that nobody asked
for (`_md_update_fut` set, the waiter not). The task then refreshes once more at once if
the list changed, as aiokafka intends; if it did not, the waiter is replaced after the
refresh as usual and nothing more is sent. Installed in every process by services.kafka_mends.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

# aiokafka is imported by install(), not here: services.kafka_mends installs this as
# aiokafka's own import ends, and this module imported first would begin that import
# half-initialised itself (a circular import).
if TYPE_CHECKING:
    from aiokafka.client import AIOKafkaClient

# aiokafka's own set_topics, kept by install() before it is replaced.
_aiokafka_set_topics: Callable[..., Any] | None = None


def _set_topics(self: "AIOKafkaClient", topics: Any) -> Any:
    assert _aiokafka_set_topics is not None  # replaced only by install(), which keeps it
    answer = _aiokafka_set_topics(self, topics)
    # A refresh asked for sets the waiter before it creates the future, so a future with an
    # unset waiter is a periodic refresh on the wire (or one already lost, which this wakes).
    if self._md_update_fut is not None and not self._md_update_waiter.done():
        self._md_update_waiter.set_result(None)
    return answer


def install() -> None:
    """Idempotent; for the whole process (every aiokafka client in it)."""
    global _aiokafka_set_topics
    from aiokafka.client import AIOKafkaClient

    if AIOKafkaClient.set_topics is not _set_topics:
        _aiokafka_set_topics = AIOKafkaClient.set_topics
        AIOKafkaClient.set_topics = _set_topics


def installed() -> bool:
    from aiokafka.client import AIOKafkaClient

    return AIOKafkaClient.set_topics is _set_topics
