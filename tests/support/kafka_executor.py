"""The call plan's executor (services.dispatcher.executor) driven by a test, one dispatch at a
time, with a report sink that produces each observation to recon.observations (as the
decider does with an answer it cannot take inline), so the test reads what a call reported
from the topic."""

from events.envelope import Envelope
from events.inputs import OperationObserved
from events.keys import partition_key
from events.transaction_events import OperationDispatched
from services.config import Settings
from services.dispatcher.executor import DispatchOrder, Executor
from services.dispatcher.gatekeeper import Gatekeeper
from services.kafka_clients import acked_producer
from services.providers.registry import Accounts


class KafkaExecutor:
    def __init__(self, settings: Settings, accounts: Accounts) -> None:
        self.settings = settings
        self.accounts = accounts
        self.producer = acked_producer(settings)
        self.gate = Gatekeeper(settings, self.producer)
        self.executor = Executor(accounts, self.gate, self)

    async def call(self, envelope: Envelope, dispatch: OperationDispatched, partition: int) -> None:
        await self.executor.run(DispatchOrder(envelope, dispatch, partition))

    async def observed(self, order: DispatchOrder, observation: OperationObserved) -> None:
        env = order.envelope
        await self.producer.send_and_wait(
            self.settings.topics.observations,
            value=observation.model_dump_json().encode(),
            key=partition_key(env.tenant, env.tx_id),
            partition=order.partition,
        )
