"""A database as the last release before versioned migrations left it (the upgrade tests).

That release had no migrate step: each process applied the schema texts it needed at
start-up, each in a transaction with its sha256 digest recorded in `schema_applied`, so a
start-up that found the digest ran nothing. Version 1 (services/migrations/0001.baseline.sql)
holds those texts exactly, one section each; applying the sections the same way gives the
database that release's processes made. tests/unit/test_migration_baseline.py holds the
sections to the digests that release recorded.
"""

import hashlib
import re

import asyncpg

from services.migrate import BASELINE, MIGRATIONS

# The order a whole stack of that release applied them in: the intake and the projector
# first (projections, then governance and console), the reconciler's own last.
EVERY_PROCESS = ("projections", "governance", "console", "reconciler")
_SECTION = re.compile(r"^-- ---- (\w+)[^\n]* ----\n", re.M)


def sections() -> tuple[str, dict[str, str]]:
    """The baseline's preamble (the `schema_applied` table) and each part's exact text."""
    parts = _SECTION.split((MIGRATIONS / f"{BASELINE}.sql").read_text())
    # Each section is followed by one blank line separating it from the next.
    return parts[0], {name: body[:-1] for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def build(conn: asyncpg.Connection, parts: tuple[str, ...] = EVERY_PROCESS) -> None:
    """Apply `parts` (the baseline's section names) as that release's start-ups did."""
    preamble, texts = sections()
    await conn.execute(preamble)
    for part in parts:
        async with conn.transaction():
            await conn.execute(texts[part])
            await conn.execute(
                "INSERT INTO schema_applied (digest) VALUES ($1)", digest(texts[part])
            )
