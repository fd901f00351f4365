"""KRaft Kafka nodes run from the Maven Central jars, no Docker needed: one node alone
(the default), or one of several in a KafkaCluster (services.devtools.infra.kafka_cluster)."""

from __future__ import annotations

import base64
import fcntl
import shutil
import signal
import socket
import struct
import subprocess
import time
import uuid
from pathlib import Path

from services.devtools.infra._process import (
    REPO_ROOT,
    InfraError,
    ServerProcess,
    ensure_port_free,
    tail,
)
from services.devtools.infra.secure_listener import NAME as SECURE_NAME
from services.devtools.infra.secure_listener import SecureListener

KAFKA_VERSION = "3.9.1"
POM = REPO_ROOT / "compose" / "kafka" / "pom.xml"
CACHE_DIR = REPO_ROOT / ".cache" / f"kafka-{KAFKA_VERSION}"
LIBS_DIR = CACHE_DIR / "libs"
# Written only after Maven finished, so an interrupted download is never mistaken for a cache.
LIBS_MARKER = CACHE_DIR / "libs.complete"

# The broker JVM's options besides its heap; the compose broker gets the same
# (compose/docker-compose.yml KAFKA_JVM_PERFORMANCE_OPTS, held equal by
# tests/unit/test_compose_file.py). G1 with the JVM's own pause target, named so that a
# 1-core container (where the JVM would pick the serial collector) runs what was measured.
# The serial collector was tried on the 2-core machine (docs/benchmark.md, "Where the
# broker's CPU goes"): its GC threads cost 0.1 ms per transaction at c30 against G1's
# 0.2-0.6, but the broker's CPU as a whole did not fall beyond the noise (nor did its
# young pauses differ: 40-70 ms against G1's 25-150 on the loaded machine).
JVM_OPTIONS = ("-XX:+UseG1GC", "-Djava.awt.headless=true")

# A broker restarted after SIGKILL recovers its logs first; on a loaded 2-core CI machine
# that took longer than 60 s once, failing a test whose subject was not the start.
START_TIMEOUT_S = 120.0


def ensure_kafka_jars(*, quiet: bool = True) -> Path:
    """Fetch the broker's jars into the repo cache unless a complete copy is already there."""
    if LIBS_MARKER.exists():
        return LIBS_DIR
    if shutil.which("mvn") is None:
        raise InfraError("Maven (`mvn`) is needed to fetch the Kafka broker jars; install it")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    # Several pytest sessions or `make` targets may start at once on a fresh checkout.
    with (CACHE_DIR / "fetch.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not LIBS_MARKER.exists():
            _fetch_jars(quiet)
    return LIBS_DIR


def _fetch_jars(quiet: bool) -> None:
    staging = CACHE_DIR / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    cmd = ["mvn", "-B", "-f", str(POM), "dependency:copy-dependencies"]
    cmd += [f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
    if quiet:
        cmd.insert(1, "-q")
    result = subprocess.run(cmd, check=False, capture_output=quiet, text=True)
    if result.returncode != 0:
        output = (result.stdout or "") + (result.stderr or "")
        raise InfraError(f"fetching Kafka jars with Maven failed ({result.returncode}):\n{output}")
    shutil.rmtree(LIBS_DIR, ignore_errors=True)
    staging.rename(LIBS_DIR)
    LIBS_MARKER.write_text(f"kafka {KAFKA_VERSION}\n")


def _kafka_uuid() -> str:
    # Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, without padding. Like
    # Uuid.randomUuid(), skip ids starting with "-": StorageTool would parse one as an option.
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value


def _metadata_ready(port: int, node_id: int) -> bool:
    """True once the broker answers a Metadata request listing itself and a controller.

    A bare TCP connect is not enough: the socket server accepts connections before the
    broker has registered with the KRaft controller and been unfenced, and clients that
    connect in that window see an empty cluster. In a cluster the other brokers are listed
    before this one has caught up, so it must find its own id among them.
    """
    request = struct.pack(">hhih", 3, 1, 1, len(b"recon-infra")) + b"recon-infra"
    request += struct.pack(">i", 0)  # Metadata v1: an empty topic list means "no topics"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            header = _recv_exact(sock, 4)
            (size,) = struct.unpack(">i", header)
            body = _recv_exact(sock, size)
    except OSError:
        return False
    # Response v1: correlation_id, [node_id host port rack], controller_id, topics
    pos = 4
    (broker_count,) = struct.unpack_from(">i", body, pos)
    pos += 4
    listed: set[int] = set()
    for _ in range(broker_count):
        (listed_id,) = struct.unpack_from(">i", body, pos)
        listed.add(int(listed_id))
        pos += 4
        (host_len,) = struct.unpack_from(">h", body, pos)
        pos += 2 + host_len + 4  # host, port
        (rack_len,) = struct.unpack_from(">h", body, pos)
        pos += 2 + max(rack_len, 0)
    (controller_id,) = struct.unpack_from(">i", body, pos)
    return node_id in listed and int(controller_id) >= 0


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class KafkaBroker(ServerProcess):
    """One KRaft node acting as both broker and controller, with its state in `data_dir`.

    Alone by default. In a cluster, every node gets the same `voters` (the controller
    quorum) and `cluster_id`, and `replication`/`min_insync` for Kafka's internal topics.
    """

    stop_signal = signal.SIGTERM  # controlled shutdown: leadership moved, logs flushed

    def __init__(
        self,
        data_dir: Path,
        port: int,
        controller_port: int,
        *,
        node_id: int = 1,
        voters: str | None = None,
        cluster_id: str | None = None,
        replication: int = 1,
        min_insync: int = 1,
        heap: str = "768m",
        secure: SecureListener | None = None,
        request_log: bool = False,
    ) -> None:
        super().__init__()
        # Every request the broker completes, one line each in `requests_log` (Kafka's
        # request logger at DEBUG), after the time it was completed: for counting requests
        # by kind and client, and where each one's time went (its queue, handling, remote
        # and network times; a client's transaction read back from its requests). It costs
        # the broker CPU per request, so CPU is not measured in a run that writes it.
        self.request_log = request_log
        self.data_dir = data_dir.resolve()
        self.port = port
        self.controller_port = controller_port
        self.node_id = node_id
        self.voters = voters or f"{node_id}@127.0.0.1:{controller_port}"
        self.cluster_id = cluster_id
        self.replication = replication
        self.min_insync = min_insync
        self.heap = heap
        # A second listener that takes TLS and SASL logins, besides PLAINTEXT on `port`.
        self.secure = secure

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dirs(self) -> Path:
        return self.data_dir / "kraft-logs"

    @property
    def stdout_log(self) -> Path:
        return self.data_dir / "broker.out"

    @property
    def server_log(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def requests_log(self) -> Path:
        return self.data_dir / "requests.log"

    def ensure_jars(self) -> Path:
        return ensure_kafka_jars()

    def start(self) -> None:
        if self.is_running():
            return
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the JVM without waiting: a cluster node only becomes ready once a
        majority of the controller quorum runs, so a cluster launches every node first."""
        if self.is_running():
            return
        libs = self.ensure_jars()
        ensure_port_free(self.port, "kafka")
        ensure_port_free(self.controller_port, "kafka controller")
        if self.secure is not None:
            ensure_port_free(self.secure.port, "kafka secure listener")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        properties = self._write_config()
        classpath = f"{libs}/*"
        if not (self.log_dirs / "meta.properties").exists():
            self._format_storage(classpath, properties)

        log4j = self.data_dir / "log4j.properties"
        cmd = ["java", "-Xms256m", f"-Xmx{self.heap}", *JVM_OPTIONS]
        cmd += [f"-Dlog4j.configuration=file:{log4j}", "-cp", classpath]
        cmd += ["kafka.Kafka", str(properties)]
        self._spawn(cmd, self.stdout_log, self.data_dir)

    def _write_config(self) -> Path:
        properties = self.data_dir / "server.properties"
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.log_dirs),
            "num.partitions": "4",
            # Kafka's own topics (consumer offsets, transaction state) need the same
            # durability as recon's, or losing one broker would lose committed offsets or
            # the decider's transaction state.
            "offsets.topic.replication.factor": str(self.replication),
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": str(self.replication),
            "transaction.state.log.min.isr": str(self.min_insync),
            "default.replication.factor": str(self.replication),
            "min.insync.replicas": str(self.min_insync),
            "transaction.state.log.num.partitions": "4",
            # A lone test consumer would otherwise wait 3 s for peers before every assignment.
            "group.initial.rebalance.delay.ms": "0",
            # Kafka's default session. A node that misses its heartbeats for a session is
            # fenced by the controller, even by its own controller in this one JVM: with 4 s a
            # broker stalled in turns (4.5 s stopped, 0.3 s running: a loaded 2-core box, GC)
            # was fenced on every stall, its partitions left leaderless and, in a cluster, its
            # replicas out of the ISR (NotLeaderForPartition, NotEnoughReplicas under
            # min.insync.replicas; tests/fault/test_broker_stalls.py). The price: a node
            # restarted after a crash re-registers once its old session lapsed (up to 9 s).
            "broker.heartbeat.interval.ms": "1000",
            "broker.session.timeout.ms": "9000",
            # Topics are created explicitly with their own retention; a typo must fail loudly.
            "auto.create.topics.enable": "false",
            # Left at Kafka's defaults on purpose, measured on a 2-core machine (docs/
            # benchmark.md, "Where the broker's CPU goes"): 1 network, 2 I/O and 2
            # background threads instead of 3, 8 and 10 changed nothing beyond the noise;
            # C1-only JIT (-XX:TieredStopAtLevel=1) spares the warm-up's compiling but makes
            # every request dearer for as long as the broker runs; and
            # transaction.partition.verification.enable stays on: its round trip is ~1 ms of
            # a transactional Produce, and without it a produce that arrives after its
            # transaction ended opens one that never ends, stalling every read_committed
            # reader of that partition.
        }
        if self.secure is not None:
            listener = f"{SECURE_NAME}://127.0.0.1:{self.secure.port}"
            settings["listeners"] += f",{listener}"
            settings["advertised.listeners"] += f",{listener}"
            settings["listener.security.protocol.map"] += f",{SECURE_NAME}:{self.secure.protocol}"
            settings |= self.secure.server_properties()
        properties.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        log4j = self.data_dir / "log4j.properties"
        log4j.write_text(
            "log4j.rootLogger=WARN, file\n"
            "log4j.appender.file=org.apache.log4j.FileAppender\n"
            f"log4j.appender.file.File={self.server_log}\n"
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            # The one INFO line worth keeping: it marks each successful start in the log.
            "log4j.logger.kafka.server.KafkaRaftServer=INFO\n"
            # And a node's fencing and unfencing ("fenced=1"), rare and the cause of a burst
            # of NotLeaderForPartition / NotEnoughReplicas answers.
            "log4j.logger.org.apache.kafka.controller.ClusterControlManager=INFO\n"
        )
        if self.request_log:
            with log4j.open("a") as out:
                out.write(
                    "log4j.logger.kafka.request.logger=DEBUG, requests\n"
                    "log4j.additivity.kafka.request.logger=false\n"
                    "log4j.appender.requests=org.apache.log4j.FileAppender\n"
                    f"log4j.appender.requests.File={self.requests_log}\n"
                    "log4j.appender.requests.layout=org.apache.log4j.PatternLayout\n"
                    "log4j.appender.requests.layout.ConversionPattern=%d{ISO8601} %m%n\n"
                )
        return properties

    def _format_storage(self, classpath: str, properties: Path) -> None:
        cmd = ["java", "-Xmx256m", "-cp", classpath, "kafka.tools.StorageTool", "format"]
        cmd += ["-t", self.cluster_id or _kafka_uuid(), "-c", str(properties)]
        if self.secure is not None:
            cmd += self.secure.scram_format_args()
        result = subprocess.run(cmd, cwd=self.data_dir, check=False, capture_output=True, text=True)
        if result.returncode != 0:
            raise InfraError(
                f"formatting KRaft storage in {self.log_dirs} failed ({result.returncode}):\n"
                f"{result.stdout}{result.stderr}"
            )

    def wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise InfraError(f"kafka exited with code {code} while starting\n{self._logs()}")
            if _metadata_ready(self.port, self.node_id):
                return
            time.sleep(0.25)
        self.kill()
        raise InfraError(
            f"kafka did not become ready on {self.bootstrap} within {START_TIMEOUT_S:.0f} s\n"
            f"{self._logs()}"
        )

    def _logs(self) -> str:
        return (
            f"--- {self.stdout_log} ---\n{tail(self.stdout_log)}\n"
            f"--- {self.server_log} ---\n{tail(self.server_log)}"
        )
