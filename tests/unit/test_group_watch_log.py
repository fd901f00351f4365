"""The group watch's log (services.intake.group_watch): a group failing is said once per
episode, and not in the quiet spell after the intake's start, when the processes are still
joining; `/healthz`'s verdict is not held back."""

import logging

import pytest

from events.topics import Topics
from services.config import Settings
from services.consumer_groups import SAGA
from services.intake.group_watch import NO_CONSUMER, START_QUIET_S, GroupSeen, GroupWatch

SETTINGS = Settings(
    kafka_bootstrap="127.0.0.1:9", database_url="", topics=Topics("t."), environment="test"
)
EMPTY = GroupSeen("Empty", ())
STABLE = GroupSeen("Stable", ("recon-saga-inputs@/10.0.0.7",))


def test_a_group_not_joined_yet_at_start_is_not_logged_until_the_quiet_spell_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    watch = GroupWatch(None, SETTINGS, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="services.intake.group_watch"):
        # Joining at start: failing /healthz, nothing logged, then ok with nothing to undo.
        assert watch._judge(SAGA, EMPTY) == NO_CONSUMER
        now[0] += 3
        assert watch._judge(SAGA, STABLE) == "ok"
        assert caplog.records == []
        # Still without a member once the spell is over: said then, once.
        now[0] += START_QUIET_S
        watch._judge(SAGA, EMPTY)
        watch._judge(SAGA, EMPTY)
        assert [r.levelname for r in caplog.records] == ["WARNING"]
        assert "no consumer running" in caplog.records[0].getMessage()
        watch._judge(SAGA, STABLE)
        assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
