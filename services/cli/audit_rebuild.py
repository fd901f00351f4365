"""`audit rebuild`: recon.events and recon.drift from offset 0 into a fresh database.

The same schema (services/migrations, applied to the fresh database first) and the same
batch writer (projections.writer) as the live projector, fed the records it would be fed,
so what comes out is what the live projection must hold (promise 6). Poison records are
skipped as the projector skips them, but never dead-lettered again: an audit writes nothing
to Kafka.
"""

import asyncio
import sys
from urllib.parse import urlsplit

import asyncpg

from events.drift import DriftDetected
from events.envelope import Envelope
from events.transaction_events import Event
from projections.decode import decode_drift, decode_event
from projections.view import ViewError
from projections.writer import DriftRecord, Record, project_batch, project_drift
from services.cli.audit_compare import compare
from services.cli.log_snapshot import AuditError, open_snapshot, where
from services.cli.progress import Progress
from services.config import Settings
from services.migrate import MigrateError, migrate

PROJECTION_TABLES = ("events", "transactions", "operations", "reviews", "drift")
_LOCAL_HOSTS = {"", "localhost", "127.0.0.1", "::1"}


def _address(url: str) -> tuple[str, int, str]:
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = "localhost" if host in _LOCAL_HOSTS else host
    database = parts.path.lstrip("/") or parts.username or ""
    return host, parts.port or 5432, database


def _redacted(url: str) -> str:
    host, port, database = _address(url)
    return f"{host}:{port}/{database}"


_IDENTITY = "SELECT current_database(), pg_postmaster_start_time(), inet_server_port()"


async def _refuse_live(live_url: str, target: asyncpg.Connection, into: str) -> None:
    """The live database is never a rebuild target: by its URL, or, if the URLs differ
    but name the same database (another host alias, a socket), by the server's answer."""
    if _address(live_url) == _address(into):
        raise AuditError(
            f"refusing to rebuild into the live database ({_redacted(into)} is "
            "RECON_DATABASE_URL): give --into a fresh, empty database"
        )
    try:
        live = await asyncpg.connect(live_url)
    except (OSError, asyncpg.PostgresError):
        return  # the live database is unreachable, so it is not the one we are connected to
    try:
        same = tuple(await live.fetchrow(_IDENTITY)) == tuple(await target.fetchrow(_IDENTITY))
    finally:
        await live.close()
    if same:
        raise AuditError(
            f"refusing to rebuild into the live database ({_redacted(into)} is the same "
            "database as RECON_DATABASE_URL): give --into a fresh, empty database"
        )


async def _require_empty(conn: asyncpg.Connection, into: str) -> None:
    for table in (*PROJECTION_TABLES, "projection_offsets"):
        if await conn.fetchval(f"SELECT EXISTS (SELECT FROM {table})"):
            raise AuditError(
                f"{_redacted(into)} already holds rows in {table}: rebuild into a fresh, "
                "empty database"
            )


async def _migrated(into: str) -> None:
    # The same migrations as the live database's: the rebuild is compared with it table by
    # table. Their progress lines go to stderr, beside the rebuild's own.
    def say(line: str) -> None:
        print(f"migrate: {line}", file=sys.stderr)

    try:
        await asyncio.to_thread(migrate, into, say)
    except MigrateError as exc:
        raise AuditError(f"cannot create the schema in --into {_redacted(into)}: {exc}") from exc


async def rebuild(
    settings: Settings, into: str, progress_every: int, bar: bool | None = None
) -> asyncpg.Connection:
    """Project the log into `into`; returns the open connection to it."""
    try:
        conn = await asyncpg.connect(into)
    except (OSError, asyncpg.PostgresError) as exc:
        raise AuditError(f"cannot connect to --into {_redacted(into)}: {exc}") from exc
    try:
        await _refuse_live(settings.database_url, conn, into)
        await _migrated(into)
        await _require_empty(conn, into)
        await _project_log(settings, conn, progress_every, bar)
    except BaseException:
        await conn.close()
        raise
    return conn


async def _project_log(
    settings: Settings, conn: asyncpg.Connection, progress_every: int, bar: bool | None
) -> None:
    events_topic, drift_topic = settings.topics.events, settings.topics.drift
    skipped = 0
    async with open_snapshot(settings.kafka_bootstrap, [events_topic, drift_topic]) as snapshot:
        progress = Progress("audit rebuild", progress_every, snapshot.total, bar=bar)
        async for batch in progress.track(snapshot.batches()):
            records: list[Record] = []
            events: list[Event] = []
            poison: list[tuple[int, int]] = []
            drift: list[DriftRecord] = []
            drift_poison: list[tuple[int, int]] = []
            for record in batch:
                decoded: tuple[Envelope, Event] | DriftDetected | str
                if record.topic == drift_topic:
                    decoded = decode_drift(record.value)
                else:
                    decoded = decode_event(record.value)
                if isinstance(decoded, str):
                    print(f"skipped {where(record)}: {decoded}", file=sys.stderr)
                    skipped += 1
                    target = drift_poison if record.topic == drift_topic else poison
                    target.append((record.partition, record.offset))
                elif isinstance(decoded, DriftDetected):
                    drift.append((record.partition, record.offset, decoded))
                else:
                    records.append((record.partition, record.offset, decoded[0]))
                    events.append(decoded[1])
            # As the live projector does (services.projector.runtime): one database
            # transaction per topic, each with its own offsets.
            try:
                await project_batch(
                    conn, events_topic, records, skipped=poison, bulk=True, events=events
                )
            except ViewError as exc:
                raise AuditError(f"the log cannot be projected: {exc}") from exc
            await project_drift(conn, drift_topic, drift, skipped=drift_poison)
    counts = {t: await conn.fetchval(f"SELECT count(*) FROM {t}") for t in PROJECTION_TABLES}
    print(
        "audit rebuild: "
        + ", ".join(f"{n} {table}" for table, n in counts.items())
        + (f", {skipped} records skipped (each named above)" if skipped else ""),
        file=sys.stderr,
    )


async def run_rebuild(
    settings: Settings,
    into: str,
    with_compare: bool,
    progress_every: int,
    wait_s: float,
    bar: bool | None = None,
) -> int:
    conn = await rebuild(settings, into, progress_every, bar)
    try:
        print(f"audit rebuild: rebuilt into {_redacted(into)}")
        if not with_compare:
            return 0
        differences = await compare(settings, conn, wait_s)
    finally:
        await conn.close()
    for difference in differences:
        print(f"DIFF {difference}")
    print(f"audit rebuild --compare: {len(differences)} differences")
    return 1 if differences else 0
