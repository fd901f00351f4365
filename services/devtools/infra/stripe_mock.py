"""stripe-mock (https://github.com/stripe/stripe-mock), Stripe's own mock of its API,
built from source with Go into the repo cache (services.devtools.infra.go_tools): the
Stripe adapter's request and response shapes are checked against it (tests/contract/
test_stripe_mock_shapes.py). Stateless, it ignores idempotency keys; the semantics are the
stateful fake's (tests/support/stripe_fake.py).
"""

from __future__ import annotations

from pathlib import Path

from services.devtools.infra.go_tools import GoTool, ensure_go_tool

STRIPE_MOCK = GoTool("stripe-mock", "github.com/stripe/stripe-mock", "v0.203.0", go="1.22.1")


def ensure_stripe_mock(*, quiet: bool = True) -> Path:
    return ensure_go_tool(STRIPE_MOCK, quiet=quiet)
