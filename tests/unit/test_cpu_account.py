"""The benchmark's CPU accounting counts a process tree, including children that exited."""

import subprocess
import sys
import time

import pytest

from services.devtools.cpu_account import CpuUse, snapshot

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_tree_counts_its_reaped_children() -> None:
    # A shell that runs a CPU-burning child to completion (and reaps it), then idles: the
    # child's CPU must still be counted, as the shell's reaped-children time.
    script = f"{sys.executable} -c '{BURN}'; echo done; sleep 5"
    shell = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        before = snapshot({"tree": shell.pid})
        assert shell.stdout is not None
        assert shell.stdout.readline().strip() == "done"
        deadline = time.monotonic() + 5
        used = CpuUse.between(before, snapshot({"tree": shell.pid})).seconds["tree"]
        while used < 0.25 and time.monotonic() < deadline:
            time.sleep(0.05)
            used = CpuUse.between(before, snapshot({"tree": shell.pid})).seconds["tree"]
        assert used >= 0.25
    finally:
        shell.kill()
        shell.wait()
