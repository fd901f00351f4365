"""The pure core imports no I/O library and reads no clock or randomness."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE = [
    *sorted((ROOT / "events").glob("*.py")),
    *sorted((ROOT / "transactions").glob("*.py")),
    ROOT / "services/governance/gate.py",
    ROOT / "events/legs.py",
    ROOT / "services/saga/reactor.py",
    ROOT / "projections/view.py",
    ROOT / "projections/moves.py",
    ROOT / "projections/operation_row.py",
    ROOT / "projections/session_row.py",
    ROOT / "projections/decode.py",
    ROOT / "projections/view_cache.py",
    ROOT / "reconcilers/signatures.py",
    ROOT / "reconcilers/webhook_intake.py",
    ROOT / "reconcilers/webhook_reading.py",
    ROOT / "reconcilers/pull.py",
    ROOT / "reconcilers/drift.py",
    ROOT / "reconcilers/drift_span.py",
    ROOT / "services/providers/classify.py",
    ROOT / "services/providers/preconditions.py",
    ROOT / "services/dispatcher/call_plan.py",
    ROOT / "services/dispatcher/call_lease.py",
    ROOT / "services/dispatcher/call_fence.py",
    ROOT / "services/dispatcher/dispatch_order.py",
    ROOT / "services/decider/take_over.py",
    ROOT / "services/providers/paths.py",
    ROOT / "services/providers/accounts.py",
    ROOT / "services/providers/sandbox_operations.py",
    ROOT / "services/providers/lookup_strategy.py",
    ROOT / "services/providers/declared/fields.py",
    ROOT / "services/providers/declared/requests.py",
    ROOT / "services/providers/declared/answers.py",
    ROOT / "services/providers/declared/lookups.py",
    ROOT / "services/providers/declared/webhooks.py",
    ROOT / "services/providers/stripe/classify.py",
    ROOT / "services/providers/stripe/forms.py",
    ROOT / "services/providers/stripe/operations.py",
    ROOT / "services/providers/stripe/webhooks.py",
    ROOT / "services/governance/resources.py",
    ROOT / "services/intake/submission.py",
    ROOT / "services/intake/operation_record.py",
    ROOT / "services/cli/audit_compare_slices.py",
    ROOT / "services/cli/audit_compare_found.py",
    ROOT / "services/devtools/restarts.py",
    ROOT / "services/devtools/approved_log.py",
    ROOT / "services/devtools/sandbox/catalog.py",
    ROOT / "services/devtools/sandbox/fingerprint.py",
    ROOT / "services/devtools/chaos/checks.py",
    ROOT / "services/devtools/chaos/history.py",
]
SOURCES = ("events", "projections", "reconcilers", "services")
FORBIDDEN_MODULES = {
    "aiokafka",
    "asyncpg",
    "uvicorn",
    "sqlite3",
    "subprocess",
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


def test_every_module_that_says_it_is_pure_is_checked() -> None:
    # A module whose opening docstring declares it `Pure:` is held to it here; a package's
    # __init__ only describes its folder.
    claimed = {
        path
        for folder in SOURCES
        for path in (ROOT / folder).rglob("*.py")
        if path.name != "__init__.py"
        and "Pure:" in (ast.get_docstring(ast.parse(path.read_text())) or "")
    }
    assert sorted(claimed - set(PURE)) == []
