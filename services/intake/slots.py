"""A bound on requests of one kind being served at once in one intake process: past it the
request is refused with 503 and Retry-After at once, before it costs anything, rather than
queued behind the others (a queue would hold the client's connection and still let one
tenant's requests delay every other tenant's). Receipts being built
(services.intake.receipts) and the webhook ingress's drift claims
(services.intake.delivery_batches) are bounded so."""

from collections.abc import Iterator
from contextlib import contextmanager

from services.intake.errors import ApiError


class Slots:
    def __init__(self, size: int) -> None:
        self.size = size
        self.taken = 0

    @contextmanager
    def take(self, what: str) -> Iterator[None]:
        """One slot for the block; ApiError 503 when all `size` are taken (`what`: the
        requests counted, as the refusal names them). No await
        between the check and the count: the event loop cannot interleave them."""
        if self.taken >= self.size:
            raise ApiError(503, "unavailable", f"{self.size} {what} at once already; retry later")
        self.taken += 1
        try:
            yield
        finally:
            self.taken -= 1
