"""How the sandbox sends webhooks: where, signed how, and how hard it retries.

Validated when built, so a bad secret or URL stops the process at start-up with a message
instead of failing every delivery later.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from reconcilers.signatures import InvalidSecretError, Scheme, key_for

# docs/contract.md: what recon's `sandbox` provider is configured with out of the box.
DEFAULT_SECRET = "whsec_c2FuZGJveC1kZXYtc2VjcmV0"
# A real provider's delivery queue announces an effect seconds, at worst minutes, after it;
# past ten minutes a benchmark run would end before its first webhook.
MAX_DELIVERY_DELAY_MS = 600_000


class WebhookConfigError(ValueError):
    """Webhook settings the sandbox cannot run with; the message says which and why."""


@dataclass(frozen=True)
class RedeliveryPolicy:
    """Exponential backoff after a failed attempt, then giving up (recorded as `failed`)."""

    first_delay_s: float = 0.5
    max_delay_s: float = 30.0
    max_attempts: int = 10

    def delay_after(self, attempts: int) -> float | None:
        """Seconds before the next attempt once `attempts` have failed; None: give up."""
        if attempts >= self.max_attempts:
            return None
        delay: float = self.first_delay_s * 2.0 ** (attempts - 1)
        return min(delay, self.max_delay_s)


@dataclass(frozen=True)
class WebhookConfig:
    url: str
    secret: str = DEFAULT_SECRET
    scheme: Scheme = Scheme.STANDARD
    # Short: a slow receiver costs a retry later, never a stuck sender.
    timeout_s: float = 3.0
    redelivery: RedeliveryPolicy = field(default_factory=RedeliveryPolicy)

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in {"http", "https"} or not parts.netloc:
            raise WebhookConfigError(
                f"Webhook URL {self.url!r} must be an absolute http(s) URL, "
                "e.g. http://127.0.0.1:8080/v1/webhooks/sandbox."
            )
        try:
            key_for(self.scheme, self.secret)
        except InvalidSecretError as exc:
            raise WebhookConfigError(
                f"Webhook secret unusable for {self.scheme.value}: {exc}"
            ) from exc


def parse_scheme(raw: str) -> Scheme:
    try:
        return Scheme(raw)
    except ValueError:
        known = " or ".join(s.value for s in Scheme)
        raise WebhookConfigError(f"Unknown webhook scheme {raw!r}; use {known}.") from None


def delivery_delay_ms(raw: str) -> int:
    """`--webhook-delay-ms`: whole milliseconds from 0 to MAX_DELIVERY_DELAY_MS (ASCII
    digits: str.isdigit alone also passes '²', which int() refuses), else argparse's usage
    error naming the value."""
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_DELIVERY_DELAY_MS:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is not a whole number of milliseconds from 0 to {MAX_DELIVERY_DELAY_MS}"
        )
    return int(raw)
