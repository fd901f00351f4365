"""aiokafka is mended in every recon process, whatever its entry, from one place
(services/kafka_mends.py: `services/__init__.py` installs it), and importing `services`
imports no aiokafka in a process that makes no Kafka client. Each entry is probed in a
fresh interpreter, which has imported nothing else; the spawned audit worker, against a
real broker, is tests/integration/test_audit_worker_mended.py."""

import subprocess
import sys

import pytest

from services import kafka_mends

ENTRIES = {
    "cli": "import services.cli.__main__",  # python -m services.cli and its one-offs
    "process": "import services.lifecycle",  # every process's run_process
    "devtool": "import services.devtools.kafka_client_bench",
    # A library that imports aiokafka before recon's own modules (faststream, a test file).
    "aiokafka_first": "import aiokafka, services.config",
    # A mend's own module first: aiokafka's import, and so the mend, begins inside it.
    "mend_module_first": "import services.kafka_consumer_stop, services.kafka_metadata_wakeup",
}


def _run(probe: str) -> str:
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_entry_runs_mended_aiokafka(entry: str) -> None:
    probe = f"{ENTRIES[entry]}\nfrom services.kafka_mends import mended\nprint(mended())"
    assert _run(probe) == "True", f"{entry} runs aiokafka unmended"


def test_the_test_process_runs_mended_aiokafka() -> None:
    # The clients tests make here, and the runtimes tests run in this process.
    assert kafka_mends.mended()


def test_a_process_without_kafka_imports_no_aiokafka() -> None:
    probe = (
        "import sys, services.devtools.sandbox.__main__, services.migrate, services.mcp.__main__\n"
        "print('aiokafka' in sys.modules)"
    )
    assert _run(probe) == "False"


def test_the_uvloop_mend_installed_again_keeps_a_wrapper_around_it() -> None:
    # services.event_loop installs it at each run; a tool wraps the mended send in between.
    probe = (
        "from aiokafka.conn import AIOKafkaConnection\n"
        "from services import kafka_uvloop\n"
        "kafka_uvloop.install()\n"
        "def counted(self, request, expect_response=True): pass\n"
        "AIOKafkaConnection.send = counted\n"
        "kafka_uvloop.install()\n"
        "print(AIOKafkaConnection.send is counted)"
    )
    assert _run(probe) == "True", "a second install dropped the wrapper around send"
