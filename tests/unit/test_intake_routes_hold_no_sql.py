"""No intake route module holds SQL: a route asks services.intake.tenant_store (bound to the
caller's tenant) or another store module, so a query with a forgotten tenant filter can only
be written where the tenant store's isolation test reads every query
(tests/integration/test_tenant_store.py)."""

import ast
import re
from pathlib import Path

import pytest

INTAKE = Path(__file__).resolve().parents[2] / "services" / "intake"
# asyncpg's ways of sending a statement.
SENDS = {
    "fetch",
    "fetchrow",
    "fetchval",
    "fetchmany",
    "execute",
    "executemany",
    "prepare",
    "cursor",
    "copy_from_query",
    "copy_from_table",
    "copy_to_table",
    "copy_records_to_table",
}
SQL = re.compile(r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM)\b")


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def is_route_module(tree: ast.Module) -> bool:
    """A module that builds an APIRouter (and so defines routes on it)."""
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name | ast.Attribute)
        and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == "APIRouter"
        for node in ast.walk(tree)
    )


def sql_in(tree: ast.Module) -> list[str]:
    """Each statement sent, or SQL text written, in the module (docstrings aside)."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in SENDS
        ):
            found.append(f"line {node.lineno}: .{node.func.attr}(")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and SQL.search(node.value)
        ):
            found.append(f"line {node.lineno}: {node.value[:60]!r}")
    return found


ROUTES = sorted(p.name for p in INTAKE.glob("*.py") if is_route_module(_tree(p)))


def test_the_scan_finds_the_route_modules_and_the_sql_in_the_stores() -> None:
    # The test would pass vacuously if it recognised no route or no SQL.
    assert {"transactions.py", "reviews.py", "drift.py", "webhooks.py", "health.py"} <= set(ROUTES)
    for store in ("tenant_store.py", "webhook_store.py", "intents.py", "resolutions.py"):
        assert not is_route_module(_tree(INTAKE / store)), store
        assert sql_in(_tree(INTAKE / store)), store


@pytest.mark.parametrize("module", ROUTES)
def test_a_route_module_holds_no_sql(module: str) -> None:
    assert sql_in(_tree(INTAKE / module)) == [], (
        f"services/intake/{module} defines routes and holds SQL: ask a store "
        "(services.intake.tenant_store) instead"
    )
