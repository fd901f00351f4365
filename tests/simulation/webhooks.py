"""The webhook ingress: the provider's deliveries through the real intake
(reconcilers.webhook_intake), matched to an operation by its idempotency key, with a
dedupe table that may miss (the decider's message-id dedupe then catches the repeat)."""

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from events.inputs import DeciderInput, OperationObserved
from reconcilers.webhook_intake import MatchedOperation, meaning
from reconcilers.webhook_reading import read_effect_webhook

from .clock import Clock
from .provider import Provider


@dataclass
class SimWebhooks:
    provider: Provider
    clock: Clock
    rng: random.Random
    operations: dict[str, MatchedOperation]  # by key (forward or compensation)
    send: Callable[[DeciderInput], None]
    seen: set[str] = field(default_factory=set)

    def deliver(self, index: int) -> None:
        delivery = self.provider.outbox.pop(index)
        if delivery.delivery_id in self.seen and self.rng.random() < 0.8:
            return  # the dedupe table caught it
        self.seen.add(delivery.delivery_id)
        notice = read_effect_webhook(delivery.body).notice
        assert notice is not None  # the sandbox sends effect.succeeded only
        op = next((self.operations[k] for k in notice.keys if k in self.operations), None)
        found = meaning("sandbox", None, delivery.delivery_id, notice, op, self.clock.at())
        if isinstance(found, OperationObserved):
            self.send(found)
        # else drift: none in these schedules
