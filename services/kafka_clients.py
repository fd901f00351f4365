"""How recon's processes read from and write to Kafka: one declared policy each, instead
of settings repeated (and drifting) in every runtime.

Reading: a consumer-group member sees only records of committed Kafka transactions (an
aborted decision must never be acted on) and commits its own position, after its work is
durable. Writing: idempotent and acknowledged by every in-sync replica, so a record that
was acknowledged survives a broker restart and a retried send is not duplicated.
"""

from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from services.config import Settings

# How long the broker holds a fetch that finds nothing new. aiokafka leaves a partition whose
# records were just handed out of the fetch it sends next, and one connection carries one
# fetch at a time: a record arriving on that partition meanwhile (the second observation of
# a transaction, its next dispatch) waits until this fetch ends. With aiokafka's 500 ms
# default that was most of the 202 -> commit p99 at no load. The price is an idle member's
# empty fetch every 10 ms (about 1% of a core each, Kafka's and its own); under load fetches
# return at once anyway.
FETCH_MAX_WAIT_MS = 10


def group_consumer(settings: Settings, group: str, **overrides: Any) -> AIOKafkaConsumer:
    options: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_bootstrap,
        "group_id": f"{settings.group_prefix}{group}",
        "isolation_level": "read_committed",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        # A dead member's partitions move on after 10 s, not the 45 s default.
        "session_timeout_ms": 10000,
        "heartbeat_interval_ms": 2000,
        "fetch_max_wait_ms": FETCH_MAX_WAIT_MS,
    }
    return AIOKafkaConsumer(**(options | overrides))


def acked_producer(settings: Settings, **overrides: Any) -> AIOKafkaProducer:
    options: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_bootstrap,
        "enable_idempotence": True,
        "acks": "all",
    }
    return AIOKafkaProducer(**(options | overrides))
