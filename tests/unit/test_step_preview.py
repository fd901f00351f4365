"""A step's preview reads its provider's answer by services.providers.classify's rule, the
dispatcher's: only a definitive refusal of the payload is shown as the step's `refusal`; a
stale revision ends the preview; anything that says nothing about the step (our
credentials or route, timing, a provider that did not answer) is `409
provider_unavailable`, with the dispatcher's alarm logged when a person must look."""

import logging

import pytest
from support.approval_builders import gated_spec

from services.intake.errors import ApiError
from services.intake.step_preview import step_preview

SPEC = gated_spec()
PREVIEWED = {"resource": "class-1", "current_revision": 41, "effects": {"a": 1}}


def unavailable(status: int | None, body: object) -> ApiError:
    with pytest.raises(ApiError) as raised:
        step_preview(SPEC, status, body)
    assert (raised.value.status, raised.value.code) == (409, "provider_unavailable")
    return raised.value


def test_a_preview_is_the_providers_answer() -> None:
    shown = step_preview(SPEC, 200, PREVIEWED)
    assert (shown.current_revision, shown.effects, shown.refusal) == (41, {"a": 1}, None)
    assert shown.approval_required is True and shown.side_effect == "destructive"


@pytest.mark.parametrize("status", [400, 402, 422])
def test_a_definitive_refusal_is_shown_as_the_steps_refusal(status: int) -> None:
    shown = step_preview(SPEC, status, {"error": "declined", "message": "no"})
    assert shown.refusal == {"status_code": status, "error": "declined", "message": "no"}
    assert shown.effects == {} and shown.current_revision is None


def test_a_stale_revision_ends_the_preview() -> None:
    with pytest.raises(ApiError) as raised:
        step_preview(SPEC, 409, {"error": "stale_revision", "message": "moved on"})
    assert (raised.value.status, raised.value.code) == (409, "stale_revision")


@pytest.mark.parametrize("status", [401, 403, 404, 405, 409])
def test_an_answer_about_our_credentials_or_route_says_nothing_and_alarms(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="services.intake.step_preview"):
        unavailable(status, {"error": "nope"})
    [alarm] = caplog.records
    assert f"{status}" in alarm.getMessage() and "credentials" in alarm.getMessage()


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503])
def test_timing_and_server_errors_say_nothing_without_an_alarm(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="services.intake.step_preview"):
        unavailable(status, {"error": "busy"})
    assert caplog.records == []


@pytest.mark.parametrize(
    ("status", "body"),
    [(None, {"error": "provider_unreachable"}), (200, ["not", "an", "object"]), (202, {})],
)
def test_no_answer_or_an_odd_2xx_says_nothing(status: int | None, body: object) -> None:
    unavailable(status, body)
