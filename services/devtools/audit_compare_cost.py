"""What one `audit rebuild --compare` costs: its rows, its seconds and its peak memory.

`python -m services.devtools.audit_compare_cost LIVE_URL REBUILT_URL TOPIC_PREFIX` runs the
compare of services.cli.audit_compare (nothing else: no rebuild) in this process between two
databases that already hold a projection, and prints one line of JSON. The peak is this
process's (getrusage's ru_maxrss), taken once the compare has returned, beside its resident
memory when the compare began (the interpreter, the imports, the connections), so their
difference is the most the compare added; with what it held at once (services.cli.
audit_compare.Held) and how long it held the live snapshot. An operator's `audit rebuild
--compare` holds the rebuild's memory too, but not at the same time (the rebuild's batches
are gone when it compares). The benchmark (services.devtools.audit_bench) runs it in a
process of its own, so that no other step's peak hides the compare's.
"""

import asyncio
import json
import resource
import sys
import time

import asyncpg

from events.topics import Topics
from services.cli.audit_compare import Held, compare
from services.config import Settings

# Every projected table, as the compare reads them.
_TABLES = ("transactions", "operations", "reviews", "events", "drift")


def _peak_kib() -> int:
    # Linux gives ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _resident_kib() -> int:
    # Not the peak so far: the imports' own peak would hide what a small compare adds.
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


async def _rows(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return sum([await conn.fetchval(f"SELECT count(*) FROM {t}") for t in _TABLES])
    finally:
        await conn.close()


async def measure(live_url: str, rebuilt_url: str, topic_prefix: str) -> dict[str, float]:
    rows = await _rows(live_url) + await _rows(rebuilt_url)
    settings = Settings("unused:9092", live_url, Topics(topic_prefix), "dev")
    rebuilt = await asyncpg.connect(rebuilt_url)
    try:
        before = _resident_kib()
        began = time.monotonic()
        held = Held()
        differences = await compare(settings, rebuilt, wait_s=0, held=held)
        seconds = time.monotonic() - began
    finally:
        await rebuilt.close()
    return {
        "rows": rows,
        "differences": len(differences),
        "seconds": round(seconds, 2),
        "peak_rss_mib": round(_peak_kib() / 1024, 1),
        "rss_before_mib": round(before / 1024, 1),
        "slices": held.slices,
        "most_rows_held": held.most_rows,
        "snapshot_s": round(held.snapshot_s, 2),
        "longest_idle_ms": round(held.longest_idle_s * 1000, 1),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(asyncio.run(measure(*argv))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
