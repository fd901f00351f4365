"""Opening a Postgres pool at process start-up: a database that is restarting is waited for,
a configuration that cannot work still stops the process.

Found by `make chaos --brokers 3`: the pull reconciler, restarted while Postgres was being
restarted, exited on `ConnectionRefusedError` / `CannotConnectNowError` ("the database system
is shutting down") from `asyncpg.create_pool` (the projector already waited; the reconciler
and the intake did not).

Transient: no connection (refused, reset, timed out: OSError, TimeoutError) or the server
says it cannot take one now (starting up, shutting down, too many clients). Everything else
(a wrong password, a database that does not exist) is raised at once. As with Kafka
(services.kafka_start), a wrong address looks like a server that is down: past
`START_TIMEOUT_S` the last error is raised and the process exits with it.

Stopped while it waits: the attempts and the back-off between them race the process's
`stop` (services.stop_race, as Kafka's starts do). Without it a SIGTERM while Postgres was
down waited out the minute of retries, and one while Postgres took connections and answered
nothing (frozen, behind a firewall that drops packets) the pool's connect timeout (60 s) an
attempt, then exited with the error. A pool cancelled in its first connections terminates
them itself (asyncpg's Pool init).
"""

import asyncio
import logging
from typing import Any

import asyncpg

from services.kafka_start import START_BACKOFF_S, START_TIMEOUT_S
from services.pg_pool import create_pool
from services.stop_race import StoppedStarting, retried

log = logging.getLogger(__name__)

TRANSIENT: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.ConnectionDoesNotExistError,
)


async def open_pool(
    url: str,
    *,
    stop: asyncio.Event | None = None,
    timeout_s: float | None = None,
    **options: Any,
) -> asyncpg.Pool:
    """`asyncpg.create_pool(url, **options)`, retrying transient failures until the deadline;
    StoppedStarting once `stop` is set, however far the pool had got."""
    opened: list[asyncpg.Pool] = []

    async def attempt() -> None:
        opened.append(await create_pool(url, **options))

    if not await retried(
        attempt,
        stop,
        what="Postgres",
        transient=lambda error: isinstance(error, TRANSIENT),
        timeout_s=START_TIMEOUT_S if timeout_s is None else timeout_s,
        backoff=START_BACKOFF_S,
        log=log,
    ):
        raise StoppedStarting("while it waited for Postgres")
    return opened[0]
