"""One step's preview, read from its provider's answer to `POST <operation path>/preview`
(services.providers.adapters.SandboxAdapter.preview): by POST /v1/previews for each step,
and again by POST /v1/approvals before an approval is produced (approve only what is still
true).

What an answer means is services.providers.classify's rule, the one the dispatcher reads a
call's answer by: a `200` with a JSON object is the preview; a definitive refusal of the
payload (`400`, `402`, `422`) is part of what the proposal would do, and is shown as the
step's `refusal`; `409 stale_revision` ends the preview (the agent re-plans); anything else
(unreachable, `5xx`, a timing `408`/`425`/`429`, a `401`/`403`/`404` about our credentials
or route, an odd `2xx`) says nothing about the step, so the preview may be asked again:
`409 provider_unavailable`, with the dispatcher's alarm logged when a person must look.
"""

import logging
from typing import Any

from events.definition import STALE_REVISION, OperationSpec
from events.inputs import Outcome
from events.legacy_facts import recorded_facts
from events.preview import StepPreview
from services.intake.errors import ApiError
from services.providers.classify import classify_response

log = logging.getLogger(__name__)


def step_preview(spec: OperationSpec, status: int | None, body: Any) -> StepPreview:
    """The step as its provider previews it, or the ApiError that ends the whole preview."""
    if status == 200 and isinstance(body, dict):
        return _shown(spec, body, None)
    seen = None if status is None else classify_response(status, body)
    if seen is not None and seen.outcome is Outcome.REJECTED:
        error = body.get("error") if isinstance(body, dict) else None
        message = body.get("message") if isinstance(body, dict) else None
        if error == STALE_REVISION:
            raise ApiError(
                409,
                STALE_REVISION,
                f"step {spec.action!r}: resource changed; re-plan required ({message or ''})",
            )
        return _shown(spec, {}, {"status_code": status, "error": error, "message": message})
    if seen is not None and seen.alarm is not None:
        log.error("preview of %s (%s): %s", spec.action, spec.operation, seen.alarm)
    # Not a server error of ours: the provider did not say; the preview may be asked
    # again. A 409 keeps the intake's 5xx for its own failures.
    raise ApiError(
        409,
        "provider_unavailable",
        f"step {spec.action!r}: the provider could not preview it ({status}); try again",
    )


def _shown(
    spec: OperationSpec, body: dict[str, Any], refusal: dict[str, Any] | None
) -> StepPreview:
    info = recorded_facts(spec.facts, spec.operation)
    effects = body.get("effects")
    notifications = body.get("notifications")
    revision = body.get("current_revision")
    resource = body.get("resource")
    reversibility = body.get("reversibility")
    return StepPreview(
        action=spec.action,
        provider=spec.provider,
        operation=spec.operation,
        side_effect=info.side_effect.value,
        # The catalog's word, unless the provider reports its own for this call.
        reversibility=reversibility
        if isinstance(reversibility, str) and reversibility
        else info.reversibility.value,
        approval_required=spec.approval_required,
        resource=resource if isinstance(resource, str) else None,
        current_revision=revision
        if isinstance(revision, int) and not isinstance(revision, bool)
        else None,
        effects=effects if isinstance(effects, dict) else {},
        notifications=notifications if isinstance(notifications, list) else [],
        refusal=refusal,
    )
