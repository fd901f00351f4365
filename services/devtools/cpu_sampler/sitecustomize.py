"""Where one recon process spends its CPU, by Python stack, sampled on CPU time.

Not a module to import: put this directory on PYTHONPATH, name an output prefix and the
process (the last part of the module it runs as: `decider`, `intake`, `projector`, `saga`,
`pull_reconciler`, `kafka_intents`, `sandbox`), and that process of a benchmark's stack writes its
cumulative samples every 5 s to `<prefix>.<pid>.<unix time>.pkl`; read two of them with
`python -m services.devtools.cpu_samples`:

    PYTHONPATH=services/devtools/cpu_sampler RECON_CPU_SAMPLER=/tmp/cpu/s \\
    RECON_CPU_SAMPLER_OF=decider uv run python -m services.devtools.bench -n 1200 -c 30 ...

The timer is ITIMER_PROF, which counts the process's CPU time only: a process preempted on
a loaded machine is not sampled, unlike py-spy's wall-clock samples (docs/benchmark.md,
"Where the decider's CPU goes"), and perf shows no Python frames under Python 3.11. The
kernel's tick (4 ms here) bounds the rate. A sample is taken when the interpreter next runs
a Python instruction, so time spent in C code that calls back into Python (pydantic-core
reading an enum's value) is charged to the callback: read the shares of whole calls (a
model_dump_json with what it calls), not of small leaves.
"""

import atexit
import collections
import os
import pickle
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

_OUT = os.environ.get("RECON_CPU_SAMPLER")
_OF = os.environ.get("RECON_CPU_SAMPLER_OF", "decider")

Frame = tuple[str, str, int]
samples: collections.Counter[tuple[Frame, ...]] = collections.Counter()


def _sample(signum: int, frame: FrameType | None) -> None:
    stack = []
    while frame is not None:
        code = frame.f_code
        stack.append((code.co_filename, code.co_name, code.co_firstlineno))
        frame = frame.f_back
    samples[tuple(stack)] += 1


def _module(main: str) -> str:
    """The last part of the module a `python -m` process runs, from its sys.argv[0] (the
    module's file): not a word of the whole command line, which names the checkout's path
    (a worktree called intake41 made every process "the intake")."""
    path = Path(main)
    return path.parent.name if path.name == "__main__.py" else path.stem


def _run(out: str) -> None:
    time.sleep(3)  # `python -m` sets sys.argv after site has run
    if _module(sys.argv[0]) != _OF:
        return
    signal.setitimer(signal.ITIMER_PROF, 0.002, 0.002)
    # Disarmed before the interpreter shuts down: it puts SIGPROF back to its default, which
    # ends the process, so a sampled script that exits by itself died by the signal (-27).
    atexit.register(signal.setitimer, signal.ITIMER_PROF, 0)
    while True:
        time.sleep(5)
        with open(f"{out}.{os.getpid()}.{time.time():.0f}.pkl", "wb") as f:
            pickle.dump((time.process_time(), dict(samples)), f)


if _OUT:
    # The handler is set here, in the main thread; the timer is armed only in the process named.
    signal.signal(signal.SIGPROF, _sample)
    threading.Thread(target=_run, args=(_OUT,), daemon=True).start()
