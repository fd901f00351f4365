"""Building an index in a migration without stopping the writers of its table.

CREATE INDEX CONCURRENTLY holds no lock that stops the projector's writes (a plain CREATE
INDEX holds a ShareLock on the table for the whole build) and refuses to run inside a
transaction: a migration using it sets `__transactional__ = False`. An interrupted
concurrent build leaves an INVALID index behind that `IF NOT EXISTS` would take for done;
it is dropped and built again.
"""

from typing import Any

from yoyo import step


def build(conn: Any, name: str, definition: str) -> None:
    """CREATE INDEX CONCURRENTLY `name` `definition` ("ON table (...)"), unless a valid
    index of that name exists. `conn`: yoyo's DB-API connection."""
    cursor = conn.cursor()
    cursor.execute(
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE c.relname = %s AND pg_table_is_visible(c.oid)",
        (name,),
    )
    row = cursor.fetchone()
    if row is not None and row[0]:
        return
    if row is not None:
        cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    cursor.execute(f"CREATE INDEX CONCURRENTLY {name} {definition}")


def drop(conn: Any, name: str) -> None:
    conn.cursor().execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


def migration_steps(name: str, definition: str) -> list[Any]:
    """The steps of a migration that only adds the index `name` `definition` (built by
    `build`, dropped on rollback); its module sets `__transactional__ = False` itself, since
    yoyo reads that from the module."""
    return [step(lambda conn: build(conn, name, definition), lambda conn: drop(conn, name))]
