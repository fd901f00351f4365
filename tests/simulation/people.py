"""The people around recon: the agent (submits, sometimes aborts, sometimes submits
again) and the operator, who resolves reviews truthfully from what the provider holds."""

import random
from dataclasses import dataclass

from events.definition import OperationKind, Resolution
from events.inputs import AbortTransaction, ResolveReview, SubmitTransaction
from projections.view import TxView

from .clock import Clock
from .provider import Provider


def abort(tx: SubmitTransaction, clock: Clock) -> AbortTransaction:
    return AbortTransaction(
        message_id=f"abort:{tx.tx_id}",
        tenant=tx.tenant,
        tx_id=tx.tx_id,
        actor="agent",
        reason="changed its mind",
        issued_at=clock.at(),
    )


@dataclass
class Operator:
    provider: Provider
    clock: Clock
    rng: random.Random

    def open_reviews(self, view: TxView) -> list[tuple[str, str]]:
        """(review id, key of the leg under review) of each open review."""
        return [(r.review_id, r.op_key) for r in view.reviews if r.state == "open"]

    def resolve(self, view: TxView, review_id: str, key: str) -> ResolveReview:
        review = next(r for r in view.reviews if r.review_id == review_id)
        kind = next(o.kind for o in view.operations if o.action == review.action)
        if self.provider.holds(key):
            resolution = Resolution.APPLIED
        elif kind is not OperationKind.STEP or self.rng.random() < 0.5:
            # A notification is wanted: have it sent again rather than dropped.
            resolution = Resolution.RETRY
        else:
            resolution = Resolution.NOT_APPLIED
        return ResolveReview(
            message_id=f"operator:{review_id}",
            tenant=view.tenant,
            tx_id=view.tx_id,
            review_id=review_id,
            resolution=resolution,
            note="checked at the provider",
            actor="operator",
            issued_at=self.clock.at(),
        )
