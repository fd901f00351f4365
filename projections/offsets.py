"""Where the projection stands on each topic: the next offset it reads, per partition,
stored with the rows (projection_offsets). Apart from the writer, so that a reader of
the offsets alone (`audit timeline`) does not load the projection's models."""

import asyncpg


async def load_offsets(conn: asyncpg.Connection, topic: str) -> dict[int, int]:
    rows = await conn.fetch(
        "SELECT partition, next_offset FROM projection_offsets WHERE topic = $1", topic
    )
    return {row["partition"]: row["next_offset"] for row in rows}
