"""Test-only pause and crash points: hold a process at the exact moment a crash test must
kill it, or end it there. Never armed in a deployment.

A crash test claims something about one narrow window (the provider's effect is done but the
decider that made the call has not decided its answer; the saga's commands are acknowledged
but its offset is not committed; the decider's records are in an open Kafka transaction).
Killing "at about the right time" lets a late or early kill pass for the wrong reason, so the
runtimes name these windows and a test arms one:

    RECON_PAUSE_AT=<point name>      the point to stop at (unset in production: a no-op)
    RECON_PAUSE_FILE=<path>          written when the process reaches the point

On reaching the armed point the process writes the file and then blocks its whole event loop
(no heartbeat, no timer, no other task runs), so it stays exactly there until the test kills
it, or deletes the file to let it go on (once; it never pauses again). A task pause point
(`task_pause_point`) holds only the tasks that reach it, for a window the rest of the
process must go on through (a rebalance, which needs the consumer's heartbeats).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

PAUSE_AT_ENV = "RECON_PAUSE_AT"
PAUSE_FILE_ENV = "RECON_PAUSE_FILE"

# The windows the runtimes name. The two `dispatcher.*` windows are in the provider calls the
# decider makes (services/dispatcher/executor.py, run by services/decider/dispatch_host.py):
# arming one holds the decider.
# The provider applied the call and answered; the answer is neither decided nor written.
DISPATCHER_AFTER_PROVIDER_ANSWERED = "dispatcher.after_provider_answered"
# A task pause point, right after the one above: the provider answered and the lease book has
# the call off the wire (services.dispatcher.held_leases), its answer not reported, while
# the process goes on (a revocation comes, lets the call's lease go, and its partition's
# next owner takes the call over).
DISPATCHER_ANSWER_NOT_REPORTED = "dispatcher.answer_not_reported"
# Every gate passed, the "about to call" record not written yet: an abort or a switch
# recorded now must still stop the call.
DISPATCHER_BEFORE_CALL_BEGUN = "dispatcher.before_call_begun"
SAGA_AFTER_COMMANDS_ACKED = "saga.after_commands_acked"
DECIDER_IN_OPEN_TRANSACTION = "decider.in_open_transaction"
# Decisions that only record evidence are staged, in memory only: no record sent, no offset
# committed, no transaction open (services.decider.group_commit).
DECIDER_WITH_STAGED_INPUTS = "decider.with_staged_inputs"
# A Kafka transaction committed, with its inputs' offsets on the changelog; the consumer
# group's lag marker not sent yet, so the group is behind what was decided.
DECIDER_AFTER_COMMIT = "decider.after_commit"
# A partition's Kafka transaction open, its records sent; a later input of the partition
# decided on its states and staged for the next transaction (services.decider.runtime).
DECIDER_WITH_PIPELINED_INPUTS = "decider.with_pipelined_inputs"
# A take's Kafka cluster is registered (`kafka_clusters`), its fence not written to
# `call_fences` yet (services.dispatcher.calls_begun.write_fence: two statements).
FENCE_CLUSTER_REGISTERED = "dispatcher.fence_cluster_registered"
# A migration's steps are applied, the migration not yet marked applied (services.migrate.
# _apply); the point's name ends with the migration's id: `migrate.applied_unmarked:0006...`.
MIGRATE_APPLIED_UNMARKED = "migrate.applied_unmarked:"
# The intent's row and its natural keys are claimed in Postgres, its command not produced.
INTAKE_AFTER_CLAIM = "intake.after_claim"
# A drift report produced and acknowledged by Kafka, the claim that let it be produced
# (reconcilers.store.claiming_reports) still open, not committed: in the drift scan
# (services.pull_reconciler.runtime) and in the webhook ingress (services.intake.webhooks).
DRIFT_PRODUCED_CLAIM_OPEN = "drift.produced_claim_open"
# A webhook's drift claimed, produced and its claim committed; the delivery not recorded
# (services.intake.webhooks).
INTAKE_DRIFT_CLAIMED_UNRECORDED = "intake.drift_claimed_unrecorded"
# A webhook delivery answered 2xx (its observation acknowledged by Kafka), its id not
# recorded yet: the statement that is to carry it is about to run (services.intake.
# delivery_batches).
INTAKE_ANSWERED_UNRECORDED = "intake.answered_unrecorded"
# The drift scan's findings are produced and remembered as reported; the accounts' cursors
# are not moved yet (services.pull_reconciler.runtime).
DRIFT_BEFORE_CURSORS = "reconciler.drift_before_cursors"


# `audit rebuild --compare` inside its read-only snapshot of the live database, between two
# of its reads (services.cli.audit_compare): a compare stopped here holds the snapshot.
AUDIT_COMPARE_IN_SNAPSHOT = "audit.compare_in_snapshot"


# Set once the test let the process go on: it pauses at most once.
_released = False


def armed(name: str) -> bool:
    return os.environ.get(PAUSE_AT_ENV) == name and not _released


async def pause_point(
    name: str, *, when: bool = True, flush: Callable[[], Awaitable[object]] | None = None
) -> None:
    """Hold here if `name` is the armed point (and `when` holds); otherwise return at once.

    `flush` runs first, so what the process has queued so far (e.g. records of an open Kafka
    transaction) has reached the broker when the test sees the marker. The process holds
    until the test deletes the marker file (or kills it), then goes on and never pauses
    again: a zombie that wakes up after a successor took over.
    """
    if not when or not armed(name):
        return
    if flush is not None:
        await flush()
    _hold(name)


async def task_pause_point(name: str) -> None:
    """Hold the task that reaches `name` if it is the armed point, and only it: the event
    loop goes on. Each task that arrives adds a line to the file (the test counts them);
    all go on once the test deletes it, and none holds here again."""
    global _released
    if not armed(name):
        return
    marker = _marker()
    with marker.open("a") as lines:
        lines.write(f"{name} {os.getpid()}\n")
    while marker.exists():
        await asyncio.sleep(0.05)
    _released = True


def _marker() -> Path:
    return Path(os.environ.get(PAUSE_FILE_ENV) or f"/tmp/recon-pause-{os.getpid()}")


def _hold(name: str) -> None:
    global _released
    marker = _marker()
    marker.write_text(f"{name} {os.getpid()}\n")
    # Blocking on purpose: the event loop (heartbeats, timers, other tasks) must not move on
    # while the test acts.
    while marker.exists():
        time.sleep(0.05)
    _released = True


# Crash points: where a pause point holds a process for the test to kill, a crash point
# ends it on its own, like kill -9 (no cleanup, no finally blocks, no flush), for windows a
# test cannot reach from outside (say, after a claim in Postgres and before the Kafka send
# it guards). Armed with RECON_TEST_CRASH_AT=<name>; unset, the call is one look-up.
CRASH_ENV = "RECON_TEST_CRASH_AT"
CRASH_EXIT_CODE = 137  # what a shell reports for a process killed by SIGKILL


def crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        os._exit(CRASH_EXIT_CODE)
