"""aiokafka on uvloop: a write on a connection the broker has reset is a broken connection,
as on asyncio, not an error that kills the client's metadata task.

aiokafka (0.14.0, uv.lock) writes a request with `AIOKafkaConnection.send`, which turns an
`OSError` from the write into `KafkaConnectionError` and closes the connection: every caller
handles that (a produce is retried, a metadata refresh tries the next broker). A broker
killed with our request unread resets the socket (RST). uvloop then closes the transport's
handle at once, while aiokafka's reader has yet to see the error: for a loop turn or two
the connection still says `connected()`, and uvloop refuses the write with `RuntimeError`
("unable to perform operation on <TCPTransport closed=True ...>; the handler is closed";
asyncio drops the bytes instead). Nothing in aiokafka expects that error. In the client's
metadata task (`AIOKafkaClient._md_synchronizer`) it ends the task, without a log line
(nobody awaits the task), and with it every metadata refresh: the refresh asked for is a
future nobody will resolve. A transactional producer's retried produce waits for that
refresh before it is sent again (`SendProduceReqHandler.do`), so its transaction never
ends: what fits the decider partition stalled at a broker kill in CI (docs/operations.md,
"Known limits of the Kafka client"; tests/fault/test_kafka_connection_reset.py).

`install()` makes that `RuntimeError` of a closing transport the `KafkaConnectionError`
aiokafka raises for an `OSError` there, with the same close. Any other `RuntimeError` is
raised unchanged. Installed by `services.event_loop` when it runs uvloop.
"""

from typing import Any

from aiokafka.conn import AIOKafkaConnection, CloseReason
from aiokafka.errors import KafkaConnectionError

_aiokafka_send = AIOKafkaConnection.send


def _send(self: AIOKafkaConnection, request: Any, expect_response: bool = True) -> Any:
    try:
        return _aiokafka_send(self, request, expect_response)
    except RuntimeError as error:
        writer = self._writer
        if writer is None or not writer.transport.is_closing():
            raise
        # What aiokafka does for an OSError of the same write (AIOKafkaConnection.send).
        self.close(reason=CloseReason.CONNECTION_BROKEN, exc=error)
        raise KafkaConnectionError(
            f"Connection at {self.host}:{self.port} broken: {error}"
        ) from error


# Set by the first install: a second one must not assign `send` again, which would drop what
# was wrapped around the mended `send` since (a tool's request counter,
# services.devtools.kafka_txn_micro), silently.
_installed = False


def install() -> None:
    """Idempotent; for the whole process (every aiokafka client in it)."""
    global _installed
    if not _installed:
        AIOKafkaConnection.send = _send
        _installed = True
