"""A cProfile of one running recon process, switched on and off from outside.

With `RECON_PROFILE_OUT=/path/file.prof` in its environment, a process started through
services.lifecycle profiles only between SIGUSR1 (start) and SIGUSR2 (stop and write the
file), so a benchmark measures the steady state, not imports and start-up. cProfile is in
the standard library (no extra dependency); it roughly doubles the CPU of the process it
profiles, so a profiled run's CPU figures are read for their proportions, not their totals.
"""

import cProfile
import os
import signal
import time
from types import FrameType

PROFILE_ENV = "RECON_PROFILE_OUT"


def install_from_env() -> None:
    path = os.environ.get(PROFILE_ENV)
    if not path:
        return
    # CPU time, not wall time: on a busy machine a wall-clock profile shows who waited.
    profiler = cProfile.Profile(time.process_time)

    def start(signum: int, frame: FrameType | None) -> None:
        profiler.enable()

    def stop(signum: int, frame: FrameType | None) -> None:
        profiler.disable()
        profiler.dump_stats(path)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
