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


# A thread that names itself as HotSpot names its C2 compiler, burns CPU, then waits; the
# main thread burns CPU too, under its own name.
JVM_LIKE = """
import threading, time
def compile():
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
        f.write("C2 CompilerThread0")
    t = time.thread_time()
    while time.thread_time() - t < 0.3: pass
    print("compiled", flush=True)
    time.sleep(30)
threading.Thread(target=compile, daemon=True).start()
t = time.thread_time()
while time.thread_time() - t < 0.3: pass
time.sleep(30)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_jvms_jit_compiler_threads_are_counted_apart_within_its_figure() -> None:
    before_start = {"broker": 0.0, "broker: of which JIT": 0.0}
    jvm = subprocess.Popen([sys.executable, "-c", JVM_LIKE], stdout=subprocess.PIPE, text=True)
    try:
        assert jvm.stdout is not None
        assert jvm.stdout.readline().strip() == "compiled"
        deadline = time.monotonic() + 5
        used = CpuUse.between(before_start, snapshot({"broker": jvm.pid}, jvms=("broker",)))
        while used.seconds["broker"] < 0.55 and time.monotonic() < deadline:
            time.sleep(0.05)
            used = CpuUse.between(before_start, snapshot({"broker": jvm.pid}, jvms=("broker",)))
        jit = used.seconds["broker: of which JIT"]
        assert 0.25 <= jit <= 0.45
        assert used.seconds["broker"] >= jit + 0.25
        assert "of which JIT" not in " ".join(snapshot({"broker": jvm.pid}))
    finally:
        jvm.kill()
        jvm.wait()
