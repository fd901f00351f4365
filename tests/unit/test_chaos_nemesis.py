"""The chaos runner's nemesis keeps breaking (and healing) when a server is slow to come
back: a start that times out, or is refused at once, is tried again, after a wait that grows,
instead of ending the nemesis."""

import time
from pathlib import Path

import pytest

from services.devtools.chaos.nemesis import START_TRIES, Action, Nemesis
from services.devtools.infra._process import InfraError
from services.devtools.stack import Stack


class _SlowToRecover:
    """A broker whose first `fails` starts time out (log recovery on a loaded machine)."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.starts = 0
        self.running = True

    def is_running(self) -> bool:
        return self.running

    def kill(self) -> None:
        self.running = False

    def start(self) -> None:
        self.starts += 1
        if self.starts <= self.fails:
            raise InfraError("kafka did not become ready within 60 s\n(logs)")
        self.running = True

    def restart(self) -> None:
        self.kill()
        self.start()


def _nemesis(
    server: _SlowToRecover, actions: list[Action], lines: list[str], wait_s: float = 0.001
) -> Nemesis:
    stack = Stack("127.0.0.1:9", "postgresql://nowhere", Path("unused"))
    return Nemesis(stack, server, None, actions, lines.append, retry_wait_s=wait_s)


async def test_a_restart_that_times_out_is_started_again() -> None:
    server, lines = _SlowToRecover(fails=1), list[str]()
    await _nemesis(server, [], lines).bring_back("kafka", server, server.restart)
    assert server.running and server.starts == 2
    assert any("did not come back" in line for line in lines)


async def test_each_start_after_a_refused_one_waits_longer() -> None:
    # A database killed with -9 and started at once: its port still held for a moment.
    server, lines = _SlowToRecover(fails=2), list[str]()
    server.kill()
    began = time.monotonic()
    await _nemesis(server, [], lines, wait_s=0.2).bring_back("postgres", server, server.start)
    assert server.running and server.starts == 3
    assert time.monotonic() - began >= 0.2 + 0.4
    assert [line.rsplit(" in ", 1)[1] for line in lines] == ["0.2 s", "0.4 s"]


async def test_a_broker_that_never_comes_back_is_an_error_in_the_end() -> None:
    server, lines = _SlowToRecover(fails=START_TRIES), list[str]()
    nemesis = _nemesis(server, [], lines)
    server.kill()
    with pytest.raises(InfraError):
        await nemesis.bring_back("kafka", server, server.start)
    assert server.starts == START_TRIES


async def test_the_nemesis_goes_on_after_a_slow_broker() -> None:
    server, lines = _SlowToRecover(fails=1), list[str]()
    nemesis = _nemesis(server, [Action(1, "kafka", crash=True, down_s=0.0)], lines)
    await nemesis.run(lambda: 10)
    assert server.running and nemesis.done == ["kill -9 kafka, back after 0.0s"]
