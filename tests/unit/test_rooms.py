"""Each folder imports only what its opening docstring allows: the vocabulary imports no
other folder, the libraries no process, production code no development tool, and a
process no other process."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = ("decider", "intake", "projector", "pull_reconciler", "saga")
FOLDERS = ("events", "projections", "reconcilers", "services", "transactions")
# What each library folder may import of the others (never services/).
LIBRARIES = {
    "events": set(),
    "transactions": {"events"},
    # A transaction's owner and session count are projected by the decider's own rules
    # (transactions.ownership.evolve_owner, input_bounds.SESSION_CAUSED): one judge.
    "projections": {"events", "transactions"},
    "reconcilers": {"events", "projections"},
}
# The operator commands run one drift scan through the reconciler's own runtime; the MCP
# server's tool schemas are the intake's request models; the published OpenAPI document is
# the intake's own.
ALLOWED = {("cli", "pull_reconciler"), ("mcp", "intake"), ("contract", "intake")}
# Pure rules a process may ask of another, so that a rule has one judge: the intake answers a
# claim synchronously with the decider's own ownership rule (issue 18, item 16).
SHARED_RULES = {"transactions.ownership"}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # `from services.decider import runtime` imports services.decider.runtime.
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


def _modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _room(module: str) -> str:
    """`services.intake.app` -> `intake`; `events.keys` -> `events`."""
    parts = module.split(".")
    return parts[1] if parts[0] == "services" and len(parts) > 2 else parts[0]


@pytest.mark.parametrize("folder", sorted(LIBRARIES))
def test_libraries_import_no_process(folder: str) -> None:
    for path in _modules(folder):
        ours = {m.split(".")[0] for m in _imports(path) if m.split(".")[0] in FOLDERS}
        assert ours - {folder} <= LIBRARIES[folder], f"{path.relative_to(ROOT)}: {ours}"


def test_production_imports_no_development_tool() -> None:
    for folder in FOLDERS:
        for path in _modules(folder):
            if "devtools" in path.relative_to(ROOT).parts:
                continue
            tools = {m for m in _imports(path) if m.startswith("services.devtools")}
            assert not tools, f"{path.relative_to(ROOT)} imports {tools}"


def test_a_process_imports_no_other_process() -> None:
    for room in (*PROCESSES, "cli", "contract", "providers", "mcp"):
        for path in _modules(f"services/{room}"):
            others = {
                _room(m)
                for m in _imports(path)
                if m.startswith("services.") and _room(m) in PROCESSES and _room(m) != room
            }
            assert {(room, other) for other in others} <= ALLOWED, (
                f"{path.relative_to(ROOT)} imports {others}"
            )
