"""How often a long-running recon process runs Python's cyclic garbage collector.

CPython's defaults (a young collection every 700 net allocations of container objects, an
older one every 10 of those) suit short scripts. A service allocates and frees a few
hundred objects per record, request and provider call (pydantic models, dicts, futures),
nearly all of them freed by reference counting: the collector finds almost nothing, yet
each young collection walks every young object, and each full collection every object
the process holds, the imported modules and pydantic's schemas included. In the decider
at c30 the collector took 7.5 % of the process's CPU, and each full collection paused the
event loop for ~72 ms (docs/benchmark.md, "The decider's garbage collection").

So: what exists once the process has started (modules, schemas, settings) is frozen out of
the collector's sight (gc.freeze: never freed anyway), and young collections run every
YOUNG_THRESHOLD allocations. A cycle still gets collected, somewhat later: memory held by
unreachable cycles grows by at most about that many objects.
"""

import gc

YOUNG_THRESHOLD = 10_000


def tune_for_service() -> None:
    """Call once, after start-up's imports and before the work begins."""
    gc.collect()  # what start-up left unreachable is freed, not frozen
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
