"""What Python's cyclic garbage collector costs each recon process of a benchmark.

Not a module to import: put this directory on PYTHONPATH and name an output file, and
every Python process started with that environment (the benchmark's stack copies it)
appends, every 5 s, its CPU so far and each generation's collections and CPU seconds:

    PYTHONPATH=services/devtools/gc_probe RECON_GC_PROBE=/tmp/gc.txt \\
        uv run python -m services.devtools.bench -n 1200 -c 30 --idle 0 --port-offset K

The difference between two lines of one process over the measured run is its collector's
share of its CPU (docs/benchmark.md, "The decider's garbage collection"). CPU is the
process's (time.process_time), so a shared machine's other work weighs little.
"""

import gc
import os
import sys
import threading
import time

_OUT = os.environ.get("RECON_GC_PROBE")


def _start(out: str) -> None:
    spent = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    began = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.process_time()
        else:
            generation = spent[info["generation"]]
            generation[0] += 1
            generation[1] += time.process_time() - began[0]

    def report() -> None:
        while True:
            time.sleep(5)
            # Read here, not at start: `python -m` sets sys.argv after site has run.
            name = " ".join(sys.argv[:3])
            line = " ".join(f"g{g}={n}/{s:.3f}s" for g, (n, s) in spent.items())
            with open(out, "a") as f:
                f.write(
                    f"{os.getpid()} {name!r} t={time.time():.0f} cpu={time.process_time():.2f}"
                    f" threshold={gc.get_threshold()} frozen={gc.get_freeze_count()} {line}\n"
                )

    gc.callbacks.append(timed)
    threading.Thread(target=report, daemon=True).start()


if _OUT:
    _start(_OUT)
