"""A killed server's process group is gone, not only its leader, before anything starts
again (services.devtools.infra._process.wait_group_gone): a Postgres backend forked just
before a kill -9 held the listening port after the postmaster had been reaped."""

import subprocess
import sys
import time

import pytest

from services.devtools.infra._process import ensure_port_free, group_members, wait_group_gone

# A leader that listens on a free port, says which, and exits at once, leaving a member of
# its group holding the socket for a while: the shape of a postmaster reaped before the
# backend it had just forked.
LEADER = """
import os, socket, time
listening = socket.socket()
listening.bind(("127.0.0.1", 0))
listening.listen()
print(listening.getsockname()[1], flush=True)
if os.fork() == 0:
    time.sleep(0.6)
    os._exit(0)
os._exit(0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_wait_returns_once_the_member_holding_the_port_has_exited() -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert leader.stdout is not None
    port = int(leader.stdout.readline())
    leader.wait()
    assert group_members(leader.pid) != []  # the member outlives its reaped leader
    began = time.monotonic()

    wait_group_gone(leader.pid)

    assert group_members(leader.pid) == []
    ensure_port_free(port, "the group's member")  # raises while the socket is held
    assert time.monotonic() - began < 5
    leader.stdout.close()
