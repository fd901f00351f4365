"""An ASGI app served on a loopback port inside the test's own event loop, for the fake
providers: started before the caller goes on (a failed start raises its error), stopped
when the block ends."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from services.devtools.ports import free_port


@asynccontextmanager
async def serving(app: Any, **config: Any) -> AsyncIterator[str]:
    """Serve `app` (uvicorn.Config's other settings in `config`); yields its base URL."""
    port = free_port()
    settings = {"log_level": "warning", **config}
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **settings))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError(f"{app!r} stopped before it started serving")
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
