"""The aiokafka clients of this process made and never stopped: aiokafka warns of each only
when it is collected (`Unclosed AIOKafkaConsumer`), often at the process's exit, long
after the code that dropped it ran; a test asks here instead, while it holds them."""

import gc

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer


def unstopped(client_id: str) -> list[AIOKafkaConsumer | AIOKafkaProducer]:
    """The clients named `client_id` alive and not stopped (a client never started counts:
    aiokafka warns of it too)."""
    gc.collect()  # garbage already is no longer anyone's to stop (aiokafka logs it)
    found: list[AIOKafkaConsumer | AIOKafkaProducer] = []
    for alive in gc.get_objects():
        if isinstance(alive, AIOKafkaConsumer):
            client = alive._client
        elif isinstance(alive, AIOKafkaProducer):
            client = alive.client
        else:
            continue
        if alive._closed is False and client._client_id == client_id:
            found.append(alive)
    return found
