"""`python -m services.cli`: operator commands.

    python -m services.cli drift           # the drift recon has reported (the drift table)
    python -m services.cli drift --scan    # run one drift scan now (from each account's
                                           # cursor) and print what it found
    python -m services.cli drift --scan --full  # the same over each account's whole
                                           # window, cursors not read (a backstop)
    python -m services.cli audit verify    # check every transaction's hash chain on the log
    python -m services.cli audit rebuild --into URL [--compare]  # replay the log, diff
    python -m services.cli audit timeline --tx TX_ID    # one transaction, in time order
    python -m services.cli migrate         # bring the database to the code's schema version

Reads the same RECON_* environment as every process (see README, "Configuration").
"""

import argparse
import asyncio
import json
import sys

import asyncpg

from services.cli.audit import add_audit_parser, run_audit
from services.cli.progress import Progress, add_progress_flag
from services.config import ConfigError, Settings, load_settings
from services.migrate import SchemaBehind, require_current


async def _scan(settings: Settings, bar: bool | None, full: bool) -> int:
    # Imported here: the reconciler (provider adapters, aiohttp) is the drift scan's alone.
    from services.pull_reconciler.runtime import open_reconciler

    async with open_reconciler(settings) as reconciler:
        progress = Progress("drift scan", 1, len(reconciler.accounts), unit="accounts", bar=bar)
        with progress:
            found = await reconciler.drift_scan(on_account=lambda _: progress.advance(), full=full)
    if not found:
        print("drift scan: no drift found")
        return 0
    print(f"drift scan: {len(found)} finding(s)")
    for drift in found:
        kind, provider = drift.kind.value, drift.provider
        print(f"{drift.drift_id}  {kind:<22} {provider:<10} {_describe(drift.detail)}")
    return 0


async def _show(settings: Settings) -> int:
    conn = await asyncpg.connect(settings.database_url)
    try:
        rows = await conn.fetch(
            "SELECT drift_id, kind, provider, detail, detected_at FROM drift"
            " ORDER BY detected_at, drift_id"
        )
    finally:
        await conn.close()
    if not rows:
        print("no drift reported")
        return 0
    for row in rows:
        detail = json.loads(row["detail"]) if isinstance(row["detail"], str) else row["detail"]
        print(
            f"{row['detected_at'].isoformat()}  {row['drift_id']}  {row['kind']:<22} "
            f"{row['provider']:<10} {_describe(detail)}"
        )
    return 0


async def _drift(settings: Settings, scan: bool, full: bool, bar: bool | None) -> int:
    # The drift commands read and write recon's tables as the processes do, so they start
    # only on a database at the code's schema version, as the processes do (services.migrate).
    conn = await asyncpg.connect(settings.database_url)
    try:
        await require_current(conn)
    except SchemaBehind as error:
        print(f"drift: {error}", file=sys.stderr)
        return 2
    finally:
        await conn.close()
    return await (_scan(settings, bar, full) if scan else _show(settings))


def _describe(detail: object) -> str:
    if isinstance(detail, dict) and isinstance(detail.get("message"), str):
        return str(detail["message"])
    return json.dumps(detail, sort_keys=True)


def run_migrate() -> int:
    from services.migrate import MigrateError, migrate, migrate_url

    try:
        migrate(migrate_url(), say=lambda line: print(line, flush=True))
    except MigrateError as error:
        print(f"migrate: {error}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.cli", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    drift = commands.add_parser("drift", help="show reported drift, or scan for drift now")
    drift.add_argument(
        "--scan", action="store_true", help="run one drift scan now and print what it found"
    )
    drift.add_argument(
        "--full",
        action="store_true",
        help="with --scan: judge each account's whole RECON_DRIFT_WINDOW_S, not from its "
        "cursor (the backstop the reconciler runs every RECON_DRIFT_BACKSTOP_EVERY "
        "scans); a whole listing moves the cursor on, as any scan's does",
    )
    add_progress_flag(drift)
    add_audit_parser(commands)
    commands.add_parser(
        "migrate",
        help="apply the schema migrations the database lacks (RECON_MIGRATE_DATABASE_URL, "
        "else RECON_DATABASE_URL)",
    )
    args = parser.parse_args(argv)
    if args.command == "migrate":
        # Before load_settings: migrating needs a database URL, not the processes' settings.
        return run_migrate()
    try:
        settings = load_settings()
    except ConfigError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    if args.command == "drift":
        bar = True if args.progress_bar else None
        if args.full and not args.scan:
            parser.error("drift --full goes with --scan")
        return asyncio.run(_drift(settings, args.scan, args.full, bar))
    if args.command == "audit":
        return run_audit(args, settings)
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
