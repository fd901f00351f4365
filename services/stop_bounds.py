"""How long each recon process's clean stop takes at worst, from the bounds of its steps: the
one source of the stop grace its orchestrator must give it (compose's `stop_grace_period`,
Kubernetes' `terminationGracePeriodSeconds`), past which the process is killed (SIGKILL) and
its stop ends as a crash does (docs/operations.md, "Stopping").

The worst case is a broker that takes requests and answers none (frozen, or behind a firewall
that drops packets): every step then waits its whole bound, one after another, in the order
the process takes them. A broker that answers ends each in milliseconds."""

import math

from services.at_least_once import COMMIT_TIMEOUT_S
from services.decider.dispatch_host import LEAVE_WAIT_S
from services.decider.lag_marker import HANDOVER_TIMEOUT_S
from services.decider.runtime import HAND_OVER_S
from services.intake.__main__ import REQUESTS_STOP_S
from services.kafka_clients import CONSUMER_STOP_S, PRODUCER_STOP_S
from services.projector.runtime import LAG_MARKER_TIMEOUT_S

# A client's stop past its bound still cancels its tasks (a second each, twice at most:
# kafka_clients._cancelled) and closes its connections: 0.0-1.0 s measured at stop 54-55
# (a consumer 5.0-5.5 s in all, a producer 6.0 s).
TEAR_DOWN_S = 2.0
CONSUMER_S = CONSUMER_STOP_S + TEAR_DOWN_S
PRODUCER_S = PRODUCER_STOP_S + TEAR_DOWN_S

# What a process's own exit adds once its steps are done (the loop's last callbacks, the
# interpreter's exit) on a loaded host, where a step's bound is also read late.
MARGIN_S = 5.0

# Each process's stop, step by step, in order; steps that run together are one step (their
# longest). Kept beside the code that takes them: services/decider/runtime.py (Decider._run's
# end, then run's exit stack), services/at_least_once.py (the saga's and the intents
# reader's inputs), the processes' exit stacks (services.closing).
STEPS: dict[str, tuple[tuple[str, float], ...]] = {
    "decider": (
        ("transactions on the wire", HAND_OVER_S),
        ("staged decisions handed over", HAND_OVER_S),
        ("answers forwarded", LEAVE_WAIT_S),
        # The commit on its way, then the last; the partitions' producers meanwhile.
        ("lag marker beside the partitions' producers", max(2 * HANDOVER_TIMEOUT_S, PRODUCER_S)),
        # Partitions still owned once the consumer has stopped are dropped next (Decider.
        # stop_clients; a stop asked takes none, so only those of a start given up on the
        # stop after its take): no step of its own, since then none of the steps above ran.
        ("inputs consumer", CONSUMER_S),
        ("changelog reader", CONSUMER_S),
        ("dispatch producer", PRODUCER_S),
    ),
    "saga": (
        ("last offset commit", COMMIT_TIMEOUT_S),
        ("inputs consumer", CONSUMER_S),
        ("producer", PRODUCER_S),
    ),
    "intents": (
        ("last offset commit", COMMIT_TIMEOUT_S),
        ("inputs consumer", CONSUMER_S),
        ("producer", PRODUCER_S),
    ),
    "projector": (
        ("lag marker's commit between fetches", LAG_MARKER_TIMEOUT_S),
        ("inputs consumer", CONSUMER_S),
        ("dead letters' producer", PRODUCER_S),
    ),
    "reconciler": (("producer", PRODUCER_S),),
    "intake": (
        # uvicorn lets the requests in flight end, then cancels those left.
        ("requests in flight", REQUESTS_STOP_S),
        ("group watch's positions reader", CONSUMER_S),
        ("group watch's gap reader", CONSUMER_S),
        ("producer", PRODUCER_S),
    ),
}


def worst_stop_s(process: str) -> float:
    """`process`'s clean stop at worst: its steps' bounds, one after another."""
    return sum(bound for _, bound in STEPS[process])


def stop_grace_s(process: str) -> int:
    """The grace `process`'s orchestrator must give its stop, in whole seconds."""
    return math.ceil(worst_stop_s(process) + MARGIN_S)
