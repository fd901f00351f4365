"""The pure core imports no I/O library and reads no clock or randomness."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE = [
    *sorted((ROOT / "events").glob("*.py")),
    ROOT / "services/decider/transaction.py",
    ROOT / "services/decider/evidence.py",
    ROOT / "services/decider/finished.py",
    ROOT / "services/decider/legs.py",
    ROOT / "services/saga/reactor.py",
    ROOT / "projections/view.py",
    ROOT / "reconcilers/signatures.py",
    ROOT / "reconcilers/webhook_intake.py",
    ROOT / "reconcilers/pull.py",
    ROOT / "reconcilers/drift.py",
    ROOT / "services/dispatcher/classify.py",
]
FORBIDDEN_MODULES = {
    "aiokafka",
    "asyncpg",
    "faststream",
    "httpx",
    "apscheduler",
    "random",
    "uuid",
    "time",
    "socket",
    "fastapi",
    "os",
    "secrets",
    "asyncio",
}
FORBIDDEN_CALLS = {"now", "utcnow", "today", "time", "uuid4", "random"}


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names = {(node.module or "").split(".")[0]}
        else:
            names = set()
        assert not names & FORBIDDEN_MODULES, f"{path.name} imports {names & FORBIDDEN_MODULES}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            assert node.func.attr not in FORBIDDEN_CALLS, f"{path.name} calls {node.func.attr}"
