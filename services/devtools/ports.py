"""Ports for the servers the project starts on this machine (test stacks, the chaos runner,
the stack's metrics endpoints).

Asking the kernel for port 0 hands out a port from its ephemeral range, the same range every
outgoing connection takes its local port from: between that probe and the server's own bind,
a Kafka or HTTP client of any process may take the port (seen as "address already in use"
with two test workers on one machine). So ports come from below the ephemeral range, where
no client connection lands, and each process draws from a slice of its own (by pytest-xdist
worker, else by pid), so two processes do not hand out the same port either. The workers of
one test run take neighbouring slices from a place the run's id sets, so two suites side by
side seldom share one: when they did (every run's gw1 in the same slice), a test that killed
its worker's broker and restarted it on the same port lost the port to the other suite in
between, and that worker ran on without a broker (stop 43). Two processes can still share a
slice (pids equal modulo SLICES, two runs whose places are near): each starts at a random
place in its slice, so they meet only if they draw within a stack's worth of ports of each
other, not at the slice's first port every time. Each port is still checked by binding it
once: something else may listen there.
"""

import itertools
import os
import random
import socket
import zlib
from collections.abc import Iterator
from pathlib import Path

# Below Linux's default ephemeral range (32768-60999, /proc/sys/net/ipv4/ip_local_port_range)
# and above the ports services usually sit on.
LOW = 20000
SLICE = 600
SLICES = 20


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _slice() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...
    if worker.startswith("gw") and worker[2:].isdigit():
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")  # one per run, set by xdist
        return (zlib.crc32(run.encode()) + int(worker[2:])) % SLICES
    return os.getpid() % SLICES


def _candidates() -> Iterator[int]:
    start = LOW + _slice() * SLICE
    end = min(start + SLICE, _ephemeral_floor())
    if end <= start:  # an unusual ephemeral range: share it, as port 0 would
        end = start + SLICE
    ports = range(start, end)
    first = random.randrange(len(ports))
    return itertools.cycle([*ports[first:], *ports[:first]])


_next = _candidates()


def free_port() -> int:
    """A port nothing listens on now, outside the range client connections take theirs from."""
    for _ in range(SLICE):
        port = next(_next)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in this process's slice from {LOW + _slice() * SLICE}")
