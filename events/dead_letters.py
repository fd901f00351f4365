"""The headers of a record on recon.dead-letters: one set, whoever dead-letters it.

The value and key are the poison record's own bytes, untouched; the headers say why it was
set aside (`reason`), where it came from (`origin`, `topic:partition:offset`, enough to find
it again in a topic that keeps everything) and who judged it (`consumer`, the group: the
same unreadable event is judged by each group that reads recon.events).
"""

REASON = "reason"
ORIGIN = "origin"
CONSUMER = "consumer"
# A reason is a diagnosis, not a copy of the record: the record travels as the value.
MAX_REASON_CHARS = 2000


def dead_letter_headers(
    reason: str, topic: str, partition: int, offset: int, consumer: str
) -> list[tuple[str, bytes]]:
    return [
        (REASON, reason[:MAX_REASON_CHARS].encode("utf-8", "backslashreplace")),
        (ORIGIN, f"{topic}:{partition}:{offset}".encode()),
        (CONSUMER, consumer.encode()),
    ]
