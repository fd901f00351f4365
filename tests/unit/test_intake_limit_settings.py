"""The intake's body caps and pending horizon: defaults, and values refused at start-up
because they would break a promise (a body too large for one Kafka record; a horizon a
failed produce could still outlast)."""

import pytest

from services.config import MIN_PENDING_HORIZON_S, ConfigError, load_settings
from services.intake.produce import DELIVERY_BOUND_S

NAMES = ("RECON_MAX_BODY_BYTES", "RECON_WEBHOOK_MAX_BODY_BYTES", "RECON_PENDING_HORIZON_S")


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)

    settings = load_settings()

    assert (settings.max_body_bytes, settings.webhook_max_body_bytes) == (262144, 65536)
    assert settings.pending_horizon_s == 120.0


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("RECON_MAX_BODY_BYTES", "2000000", "Kafka record"),
        ("RECON_MAX_BODY_BYTES", "lots", "whole number"),
        ("RECON_WEBHOOK_MAX_BODY_BYTES", "10", ">= 1024"),
        ("RECON_PENDING_HORIZON_S", "20", "may still reach Kafka"),
    ],
)
def test_unsafe_values_are_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, fragment: str
) -> None:
    monkeypatch.setenv(name, value)

    with pytest.raises(ConfigError, match=name) as refused:
        load_settings()

    assert fragment in str(refused.value)


def test_the_shortest_horizon_outlasts_the_producers_delivery_bound() -> None:
    assert MIN_PENDING_HORIZON_S > DELIVERY_BOUND_S
