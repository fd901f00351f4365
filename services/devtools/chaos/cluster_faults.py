"""The nemesis's Kafka on a three-node cluster: each broker fault takes down ONE node, chosen
in turn as the leader of the decider's input partition 0 (recon.commands/0), the active KRaft
controller, then the nodes in order; the next fault waits until every partition has all its
replicas in sync again, so two nodes are never down at once (min.insync.replicas=2 would
refuse writes, which is correct but not what this run proves).

It answers the nemesis's `Server` protocol (is_running, kill, start, restart), so the chaos
run is the same on one broker and on three; the calls come from a worker thread
(`asyncio.to_thread`), hence the private event loops for the admin queries.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from services.devtools.infra.kafka import KafkaBroker
from services.devtools.infra.kafka_cluster import KafkaCluster

# The order in which victims are picked; "next" cycles through the nodes.
TURNS = ("leader of the decider's input partition", "active controller", "next")


async def _describe(bootstrap: str) -> list[dict[str, Any]]:
    # A fresh client each time: the node an old client talked to may be the one killed.
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        described: list[dict[str, Any]] = await admin.describe_topics(await admin.list_topics())
        return described
    finally:
        await admin.close()


def _lagging(described: list[dict[str, Any]]) -> list[str]:
    return [
        f"{topic['topic']}[{part['partition']}]"
        for topic in described
        for part in topic["partitions"]
        if part["leader"] < 0 or set(part["isr"]) != set(part["replicas"])
    ]


class OneBrokerAtATime:
    def __init__(
        self, cluster: KafkaCluster, commands_topic: str, log: Callable[[str], None] = print
    ) -> None:
        self.cluster = cluster
        self.commands_topic = commands_topic
        self.log = log
        self.turn = 0
        self.down: list[KafkaBroker] = []

    def is_running(self) -> bool:
        return self.cluster.is_running()

    def kill(self) -> None:
        victim = self._victim()
        self.down.append(victim)
        victim.kill()

    def start(self) -> None:
        """Bring back whatever is down, then wait until it has caught up."""
        for node in self.cluster.nodes:
            if not node.is_running():
                node.start()
        self.down.clear()
        self._wait_in_sync()

    def restart(self) -> None:
        self._victim().restart()
        self._wait_in_sync()

    def _victim(self) -> KafkaBroker:
        self._wait_in_sync()  # the previous victim is fully back before the next goes
        why = TURNS[min(self.turn, len(TURNS) - 1)]
        node_id: int | None = None
        if self.turn == 0:
            node_id = self._leader_of_commands()
        elif self.turn == 1:
            node_id = self.cluster.active_controller()
        if node_id is None:
            node_id = (self.turn % len(self.cluster.nodes)) + 1
        self.turn += 1
        self.log(f"    broker fault on node {node_id} ({why})")
        return self.cluster.node(node_id)

    def _leader_of_commands(self) -> int | None:
        for topic in asyncio.run(_describe(self.cluster.bootstrap)):
            if topic["topic"] == self.commands_topic:
                for part in topic["partitions"]:
                    if part["partition"] == 0 and part["leader"] >= 0:
                        return int(part["leader"])
        return None

    def _wait_in_sync(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        behind = ["not described yet"]
        while time.monotonic() < deadline:
            try:
                behind = _lagging(asyncio.run(_describe(self.cluster.bootstrap)))
            except (KafkaError, OSError) as error:
                behind = [repr(error)]
            if not behind:
                return
            time.sleep(0.5)
        self.log(f"    replicas still out of sync after {timeout:.0f}s: {behind[:5]}")
