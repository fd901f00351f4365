"""Start one KRaft node configured the way apache/kafka's image is: every KAFKA_* variable
but the JVM's own becomes a property (strip KAFKA_, lower-case, "___" -> "-", "__" -> "_",
"_" -> "."), CLUSTER_ID formats the storage when log.dirs has none, the JVM takes
KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS and KAFKA_OPTS, and the broker then
replaces this process, so `docker stop`'s SIGTERM reaches it for a controlled shutdown."""

import os
import subprocess
import sys
from pathlib import Path

# Read by the JVM's command line below, not properties (as in apache/kafka's image).
NOT_PROPERTIES = {
    "KAFKA_VERSION",
    "KAFKA_HEAP_OPTS",
    "KAFKA_LOG4J_OPTS",
    "KAFKA_OPTS",
    "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS",
    "KAFKA_GC_LOG_OPTS",
    "KAFKA_LOG4J_ROOT_LOGLEVEL",
    "KAFKA_LOG4J_LOGGERS",
    "KAFKA_TOOLS_LOG4J_LOGLEVEL",
    "KAFKA_JMX_HOSTNAME",
}
# What apache/kafka's kafka-run-class.sh runs the broker with when KAFKA_JVM_PERFORMANCE_OPTS
# is not set; the compose file sets it.
JVM_PERFORMANCE_OPTS = (
    "-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35"
    " -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true"
)
CONFIG = Path("/tmp/server.properties")
CLASSPATH = "/opt/kafka/libs/*"
LOG4J = "-Dlog4j.configuration=file:/opt/kafka/config/log4j.properties"


def property_name(variable: str) -> str:
    name = variable.removeprefix("KAFKA_").lower()
    return name.replace("___", "-").replace("__", "\0").replace("_", ".").replace("\0", "_")


def main() -> int:
    settings = {
        property_name(key): value
        for key, value in sorted(os.environ.items())
        if key.startswith("KAFKA_") and key not in NOT_PROPERTIES
    }
    settings.setdefault("log.dirs", "/var/lib/kafka/data")
    CONFIG.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    log4j = os.environ.get("KAFKA_LOG4J_OPTS", LOG4J)
    heap = os.environ.get("KAFKA_HEAP_OPTS", "-Xms256m -Xmx512m")
    java = ["java", *heap.split(), *log4j.split(), *os.environ.get("KAFKA_OPTS", "").split()]
    log_dir = Path(settings["log.dirs"].split(",")[0])
    if not (log_dir / "meta.properties").exists():
        cluster_id = os.environ.get("CLUSTER_ID")
        if not cluster_id:
            print("kafka: CLUSTER_ID is required to format new storage", file=sys.stderr)
            return 2
        subprocess.run(
            [
                *java,
                "-cp",
                CLASSPATH,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(CONFIG),
                "--ignore-formatted",
            ],
            check=True,
        )
    performance = os.environ.get("KAFKA_JVM_PERFORMANCE_OPTS", JVM_PERFORMANCE_OPTS).split()
    args = [*java, *performance, "-cp", CLASSPATH, "kafka.Kafka", str(CONFIG)]
    os.execvp("java", args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
