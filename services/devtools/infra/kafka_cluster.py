"""Three (or more) local KRaft nodes forming one Kafka cluster, each its own process.

Every node is both broker and controller, and all of them vote in the controller quorum:
with three, any one may be killed and the other two still elect a controller and leaders,
which is what the broker-kill chaos test relies on. Node i listens for clients on
`ports[i]` and for the quorum on `controller_ports[i]`, with its state in `node-<i+1>/`.
"""

from __future__ import annotations

import signal
from pathlib import Path

from services.devtools.infra._process import signal_group
from services.devtools.infra.kafka import KafkaBroker, _kafka_uuid, ensure_kafka_jars
from services.devtools.infra.kraft_quorum import quorum_leader

# Three JVMs share a small machine (2 cores in CI) with Postgres and recon's processes.
NODE_HEAP = "512m"


class KafkaCluster:
    def __init__(
        self,
        data_dir: Path,
        ports: list[int],
        controller_ports: list[int],
        *,
        replication: int = 3,
        min_insync: int = 2,
    ) -> None:
        if len(ports) != len(controller_ports) or not ports:
            raise ValueError("one client port and one controller port per node")
        if not 1 <= min_insync <= replication <= len(ports):
            raise ValueError(
                f"replication {replication} and min.insync {min_insync} do not fit "
                f"{len(ports)} nodes"
            )
        self.data_dir = data_dir.resolve()
        self.replication = replication
        self.min_insync = min_insync
        voters = ",".join(
            f"{index + 1}@127.0.0.1:{port}" for index, port in enumerate(controller_ports)
        )
        cluster_id = self._cluster_id()
        self.nodes = [
            KafkaBroker(
                self.data_dir / f"node-{index + 1}",
                port,
                controller_port,
                node_id=index + 1,
                voters=voters,
                cluster_id=cluster_id,
                replication=replication,
                min_insync=min_insync,
                heap=NODE_HEAP,
            )
            for index, (port, controller_port) in enumerate(
                zip(ports, controller_ports, strict=True)
            )
        ]

    def _cluster_id(self) -> str:
        # Every node must be formatted with the same id, and a restarted `up` must reuse
        # it: a node whose stored id differs refuses to join.
        path = self.data_dir / "cluster.id"
        if path.exists():
            return path.read_text().strip()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        value = _kafka_uuid()
        path.write_text(value + "\n")
        return value

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, node_id: int) -> KafkaBroker:
        return self.nodes[node_id - 1]

    def start(self) -> None:
        ensure_kafka_jars()
        # All first, then wait: no node is ready before a majority of voters runs.
        for node in self.nodes:
            node.launch()
        try:
            for node in self.nodes:
                if node.is_running():
                    node.wait_ready()
                else:
                    node.start()
        except BaseException:
            self.kill()
            raise

    def is_running(self) -> bool:
        return all(node.is_running() for node in self.nodes)

    def stop(self) -> None:
        """Controlled shutdown of every node at once: stopped one by one, the last ones
        would lose their quorum and wait out their shutdown timeout for a controller."""
        running = [node for node in self.nodes if node._proc is not None]
        for node in running:
            assert node._proc is not None
            signal_group(node._proc, signal.SIGTERM)
        for node in running:
            node.stop()

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def active_controller(self) -> int | None:
        """The node id of the KRaft quorum leader, asked of the running nodes."""
        for node in self.nodes:
            if node.is_running():
                leader = quorum_leader(node.controller_port)
                if leader is not None:
                    return leader
        return None
