"""SIGQUIT's task dump names each task and every frame it awaits through, so a stuck
process says where it is stuck."""

import asyncio

from services.task_dump import describe


async def _held_by(event: asyncio.Event) -> None:
    await _deeper(event)


async def _deeper(event: asyncio.Event) -> None:
    await event.wait()


async def test_a_waiting_task_is_described_down_to_the_frame_it_waits_in() -> None:
    event = asyncio.Event()
    task = asyncio.create_task(_held_by(event), name="stuck-listener")
    await asyncio.sleep(0)
    try:
        line = describe({task})
        assert line.startswith("stuck-listener: _held_by test_task_dump.py:")
        assert " > _deeper test_task_dump.py:" in line
        assert " > wait locks.py:" in line  # asyncio.Event.wait: where it actually waits
    finally:
        event.set()
        await task
