"""reconcilers.webhook_intake.parse_notice refuses what it cannot read with a
WebhookBodyError (a 400), never another exception (a 500 the provider retries forever)."""

import pytest

from reconcilers.webhook_intake import WebhookBodyError, parse_notice


def test_a_webhook_body_nested_too_deeply_is_refused_not_a_crash() -> None:
    # 60 000 levels fit the 64 KiB webhook cap; json.loads gives up with RecursionError.
    deep = b'{"type": "effect.succeeded", "data": ' + b"[" * 60_000 + b"]" * 60_000 + b"}"

    with pytest.raises(WebhookBodyError, match="nested too deeply"):
        parse_notice(deep)
