"""aiokafka's mends, put in place in every recon process that imports aiokafka, from here
alone: its lost metadata wake-up (services.kafka_metadata_wakeup), its consumers' stop
raising their own tasks' cancellation (services.kafka_consumer_stop) and the end of an
offset commit given up left unread (services.kafka_commit_abandoned). docs/operations.md,
"Known limits of the Kafka client".

Where: `services/__init__.py` calls `install()`, and every way recon runs imports the
package `services` before it can make an aiokafka client: a process (`python -m
services.<name>`), the CLI and its one-offs, a worker `audit verify` spawns (it unpickles
its functions from services.cli), a devtool, the test process (tests/conftest.py). Each
entry point installing them itself missed one (the spawned audit workers: a CI failure,
their consumers' stop raising CancelledError), and the test process ran the metadata
wake-up unmended.

Why a hook on aiokafka's import and not `import aiokafka` here: importing the package
`services` would then import aiokafka in every process and module under it, the ones that
never use Kafka included: the pure modules tests/unit/test_purity.py keeps free of I/O
libraries would load one through their package, and the sandbox provider, `services.migrate`
and the MCP server would pay for it at each start (30-45 ms of CPU on top of their own
imports with bytecode cached, 80-120 ms alone; more where it is compiled). The hook costs
a name compared per module imported, and mends aiokafka as the last step of its own
`__init__`, which has loaded its client and consumer: no code holds an aiokafka client
before the mends are in. A process that imported aiokafka before `services` (a library's
import) is mended when it imports `services`, which recon's code does before it makes a
client. A mend that cannot find the class it patches (an upgrade moved it) fails `import
aiokafka` in every process, loudly at start rather than unmended.

Not here: services.kafka_uvloop, which only uvloop needs (services.event_loop installs it
with uvloop).
"""

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


def mend() -> None:
    """Idempotent. Imports aiokafka."""
    from services import kafka_commit_abandoned, kafka_consumer_stop, kafka_metadata_wakeup

    kafka_metadata_wakeup.install()
    kafka_consumer_stop.install()
    kafka_commit_abandoned.install()


def mended() -> bool:
    """Whether this process's aiokafka is mended. Imports aiokafka."""
    from services import kafka_commit_abandoned, kafka_consumer_stop, kafka_metadata_wakeup

    return (
        kafka_metadata_wakeup.installed()
        and kafka_consumer_stop.installed()
        and kafka_commit_abandoned.installed()
    )


def install() -> None:
    """Idempotent: mends aiokafka now if it is imported, else as soon as it is."""
    if "aiokafka" in sys.modules:
        mend()
    elif not any(isinstance(finder, _MendOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MendOnImport())


class _MendOnImport(importlib.abc.MetaPathFinder):
    """Finds aiokafka as the finders after it do, with a loader that mends it once loaded."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "aiokafka":
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: ModuleSpec | None = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenMend(spec.loader)
                return spec
        return None


class _ThenMend(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        mend()

    def __getattr__(self, name: str) -> Any:
        # The rest of the loader's interface (resource readers, get_data) as it was.
        return getattr(self._loader, name)
