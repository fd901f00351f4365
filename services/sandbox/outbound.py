"""The seam for what a provider sends out after an effect: webhooks.

Nothing is sent yet. Later work hangs signed outbound webhooks here (Standard Webhooks and
Stripe's signature scheme, duplicated, delayed and out-of-order delivery on demand, redelivery),
which is why this is called only after the effect's transaction has committed: a provider never
announces an effect it could still roll back. For a `pending` effect it is called at commit
time; a webhook sender must wait until `effect.visible_at` before announcing it.
"""

from __future__ import annotations

from services.sandbox.store import Effect


def on_effect_recorded(effect: Effect) -> None:
    """Called once per new effect, after commit. Must not raise into the request path."""
    del effect  # deliberately nothing yet
