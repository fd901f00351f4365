"""The processes that read Kafka and serve no HTTP import no web framework: the Kafka intents
door (which accepts as the HTTP route does, through services.intake.accept, with a state of
its own: kafka_intents.DoorState), the decider, the projector, the reconciler and the saga.
Starlette and FastAPI at import cost each such process start-up CPU and memory for nothing,
and a door that reads its state through the web framework's attribute bag has no types."""

import subprocess
import sys

import pytest

WEB = ("starlette", "fastapi", "uvicorn")


@pytest.mark.parametrize(
    "module",
    [
        "services.intake.kafka_intents",
        "services.decider.__main__",
        "services.projector.__main__",
        "services.pull_reconciler.__main__",
        "services.saga.__main__",
    ],
)
def test_a_kafka_reader_imports_no_web_framework(module: str) -> None:
    probe = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({WEB!r})))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert found.stdout.strip() == "[]", found.stdout
