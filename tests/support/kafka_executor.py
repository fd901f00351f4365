"""The call plan's executor (services.dispatcher.executor) driven by a test, one dispatch at a
time, reporting through the decider's own sink (services.decider.dispatch_host.DispatchHost)
for a partition it does not own: each observation is produced to recon.observations by
DispatchHost.forward, as the decider forwards an answer it cannot take inline, so the test
reads what a call reported from the topic and the record is the one the decider writes."""

from events.envelope import Envelope
from events.transaction_events import OperationDispatched
from services.config import Settings
from services.decider.dispatch_host import Answer, DispatchHost
from services.dispatcher.dispatch_order import DispatchOrder
from services.dispatcher.executor import Executor
from services.providers.registry import Accounts


def _inline(answer: Answer) -> None:
    raise AssertionError(f"an answer taken inline by a host that owns no partition: {answer}")


class KafkaExecutor:
    def __init__(self, settings: Settings, accounts: Accounts) -> None:
        self.accounts = accounts
        # Owns no partition: every report is forwarded (its producer and gate are the test's
        # to start and close).
        self.host = DispatchHost(
            settings, owned=lambda: (), answered=_inline, current=lambda *_: None
        )
        self.producer = self.host.producer
        self.gate = self.host.gate
        self.executor = Executor(accounts, self.gate, self.host, self.host.leases)

    async def call(self, envelope: Envelope, dispatch: OperationDispatched, partition: int) -> None:
        # Owning nothing, it is still the one to make the test's call: a claim waits on, and
        # no state is known here (as for a partition not owned), so a call is awaited.
        order = DispatchOrder(envelope, dispatch, partition)
        await self.executor.run(order, lambda: True, lambda: True)
