"""CPU seconds per process over a benchmark run, read from /proc (Linux).

Each component is a process the benchmark started, with all its descendants: a process's
own utime+stime, plus the cutime+cstime of every process in the tree (the time of children
already reaped, such as Postgres backends that exited). Only the benchmark's own processes
are counted, never other users' Kafka or Postgres on a shared machine. CPU time is what a
process used whatever else runs beside it, so unlike wall-clock throughput it is robust to
a busy machine: the figure to compare between runs is CPU ms per transaction.

The same idea as ../shared/peer-bench/cpuprobe.py, which classifies every process on the
machine by command line instead (for a recon started elsewhere).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float, float] | None:
    """(ppid, own cpu s, reaped children's cpu s), None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(")") + 2 :].split()
    # After ')': state=0 ppid=1 ... utime=11 stime=12 cutime=13 cstime=14
    own = (int(fields[11]) + int(fields[12])) / TICK
    reaped = (int(fields[13]) + int(fields[14])) / TICK
    return int(fields[1]), own, reaped


def process_seconds(pid: int) -> float:
    """CPU seconds so far of process `pid`, all its threads (those ended too); 0 if gone."""
    stat = _stat(pid)
    return stat[1] if stat is not None else 0.0


# A HotSpot JVM's JIT compilers run in threads named "C1 CompilerThread0", "C2 CompilerThread1",
# ...; the kernel keeps the first 15 characters of a thread's name.
JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


def jit_seconds(pid: int) -> float:
    """CPU seconds so far of the JIT compiler threads of the JVM `pid` (0 for any other
    process). Compiling is warm-up, not per-request work: a broker still compiling after
    the warm-up counts the rest of its warm-up in a run's CPU per transaction."""
    total = 0.0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                raw = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        if raw[raw.find("(") + 1 : raw.rfind(")")].startswith(JIT_THREADS):
            fields = raw[raw.rfind(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def _machine_busy() -> float:
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:9]]
    return (sum(values) - values[3] - values[4]) / TICK  # all but idle and iowait


def snapshot(
    roots: dict[str, int], self_name: str = "client", jvms: tuple[str, ...] = ()
) -> dict[str, float]:
    """CPU seconds so far of each root's process tree, of this process alone (not its
    children: the stack's processes are its children), and of the whole machine; for each
    root named in `jvms`, also its JIT compiler threads' (part of the root's figure) as
    "<root>: of which JIT"."""
    if not os.path.isdir("/proc"):
        return {}
    stats: dict[int, tuple[int, float, float]] = {}
    children: dict[int, list[int]] = defaultdict(list)
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := _stat(int(name))) is not None:
            stats[int(name)] = stat
            children[stat[0]].append(int(name))
    cpu: dict[str, float] = {}
    for component, root in roots.items():
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            if pid in stats:
                total += stats[pid][1] + stats[pid][2]
                todo.extend(children.get(pid, []))
        cpu[component] = total
        if component in jvms:
            cpu[f"{component}: of which JIT"] = jit_seconds(root)
    me = _stat(os.getpid())
    cpu[self_name] = me[1] if me else 0.0
    cpu["machine busy (all users)"] = _machine_busy()
    return cpu


@dataclass
class CpuUse:
    """CPU seconds each component used between two snapshots."""

    seconds: dict[str, float]

    @classmethod
    def between(cls, before: dict[str, float], after: dict[str, float]) -> CpuUse:
        return cls({k: after[k] - before.get(k, 0.0) for k in after})

    def table(
        self, transactions: int, own: set[str], idle: CpuUse | None = None, seconds: float = 0
    ) -> str:
        """Per component: CPU s and CPU ms per transaction; `own` are recon's processes
        (everything but the provider, the client and the machine), summed as well. With
        `idle` (CPU s per wall s measured with nothing to do), also the idle rate and the
        CPU ms per transaction above what the process would have used idle for as long."""
        head = f"{'process':<26} {'CPU s':>8} {'CPU ms/tx':>10}"
        lines = [head + (f" {'idle %CPU':>10} {'above idle':>11}" if idle else "")]

        def row(name: str, value: float, idle_rate: float | None) -> str:
            line = f"{name:<26} {value:8.2f} {value * 1000 / transactions:10.2f}"
            if idle_rate is not None:
                above = (value - idle_rate * seconds) * 1000 / transactions
                line += f" {idle_rate * 100:10.1f} {above:11.2f}"
            return line

        def rate(*names: str) -> float | None:
            return None if idle is None else sum(idle.seconds.get(n, 0.0) for n in names)

        for name, value in self.seconds.items():
            lines.append(row(name, value, rate(name)))
        lines.append(
            row("recon total (own)", sum(self.seconds[k] for k in own), rate(*sorted(own)))
        )
        return "\n".join(lines)
