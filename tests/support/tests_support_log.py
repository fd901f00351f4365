"""Reading recon.events straight from Kafka, as an auditor would."""

from collections import defaultdict

from events.envelope import Envelope, verify_chain
from events.topics import Topics
from services.devtools.stack import Stack
from support.topic_records import read_records


async def read_event_log(stack: Stack) -> dict[tuple[str, str], list[Envelope]]:
    """Every committed event, grouped by transaction, each chain verified on the way."""
    log: dict[tuple[str, str], list[Envelope]] = defaultdict(list)
    for record in await read_records(stack.kafka_bootstrap, Topics(stack.topic_prefix).events):
        envelope = Envelope.model_validate_json(record.value or b"")
        log[(envelope.tenant, envelope.tx_id)].append(envelope)
    for key, envelopes in log.items():
        assert verify_chain(envelopes) == [], (key, verify_chain(envelopes))
    return dict(log)
