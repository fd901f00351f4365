"""One chaos run: start the stack, drive the workload while the nemesis breaks things, heal
everything, wait for quiescence, collect the history and judge it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from services.devtools.chaos import collect, nemesis, workload
from services.devtools.chaos.checks import Verdict, judge, stuck, views
from services.devtools.chaos.history import History, Submitted
from services.devtools.stack import Stack

# Short timeouts and a patient reconciler: a lost response becomes `unknown` in seconds and
# is looked up soon, and a dozen faults in a row (lookups down, a broker restart) must not
# exhaust the lookup budget and send operations to a person.
CHAOS_ENV = {
    "RECON_PROVIDER_TIMEOUT_S": "2",
    "RECON_RECONCILE_INTERVAL_S": "1",
    "RECON_RECONCILE_AFTER_S": "3",
    "RECON_RECONCILE_BACKOFF_MAX_S": "4",
    "RECON_RECONCILE_BUDGET": "40",
    "RECON_LOG_LEVEL": "INFO",
}


@dataclass(frozen=True)
class ChaosConfig:
    transactions: int = 300
    faults: int = 12
    seed: int | None = None
    concurrency: int = 8
    rate: float = 8.0
    settle_timeout_s: float = 240.0
    # Kafka nodes (the caller starts them); at least one broker fault is planned per node,
    # so on a cluster each goes down once.
    brokers: int = 1

    def resolved_seed(self) -> int:
        return self.seed if self.seed is not None else random.SystemRandom().randrange(10**6)


async def run_chaos(
    config: ChaosConfig,
    stack: Stack,
    kafka: nemesis.Server | None,
    postgres: nemesis.Server | None,
    log: Callable[[str], None] = print,
) -> tuple[Verdict, History]:
    """`stack` is built but not started; Kafka and Postgres are up. Stops the stack after."""
    seed = config.resolved_seed()
    planned = workload.plan(seed, config.transactions)
    actions = nemesis.plan(seed, config.transactions, config.faults, config.brokers)
    log(
        f"chaos: seed {seed}, {config.transactions} transactions, {len(actions)} faults "
        f"(rerun: python -m services.devtools.chaos --transactions {config.transactions} "
        f"--faults {config.faults} --seed {seed} --rate {config.rate:g} "
        f"--concurrency {config.concurrency}"
        + (f" --brokers {config.brokers})" if config.brokers > 1 else ")")
    )
    # The caller's environment wins, so a run can try recon's own defaults or other values.
    chaos_env = {name: os.environ.get(name, value) for name, value in CHAOS_ENV.items()}
    stack.extra_env = {**chaos_env, **stack.extra_env}
    started = time.monotonic()
    try:
        stack.start_all()
        stack.start("decider", "-2")
        await stack.wait_ready()
        log(f"  stack up in {time.monotonic() - started:.0f}s; driving the workload")
        driver = workload.Workload(
            stack.intake_url, stack.sandbox_url, planned, config.concurrency, config.rate
        )
        breaker = nemesis.Nemesis(stack, kafka, postgres, actions, log)
        supervisor = asyncio.create_task(breaker.supervise())
        try:
            breaking = asyncio.create_task(breaker.run(lambda: driver.started))
            submitted = await driver.run()
            await breaking
            log(f"  workload done at {time.monotonic() - started:.0f}s; healing")
            await heal(stack, kafka, postgres, breaker)
            await settle(stack, submitted, config.settle_timeout_s, log)
        finally:
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
        log(f"  quiescent at {time.monotonic() - started:.0f}s; collecting and auditing")
        history = await gather_history(stack, submitted, breaker, driver)
    finally:
        stack.stop_all()
        # Whatever went wrong, leave the broker and the database up for whoever shares them
        # (the test session's other tests).
        for server in (postgres, kafka):
            if server is not None and not server.is_running():
                await asyncio.to_thread(server.start)
    log(f"  done in {time.monotonic() - started:.0f}s")
    return judge(history), history


async def heal(
    stack: Stack,
    kafka: nemesis.Server | None,
    postgres: nemesis.Server | None,
    breaker: nemesis.Nemesis,
) -> None:
    """Disarm the sandbox, bring back whatever is down, wait until the stack is ready."""
    for kind, server in (("postgres", postgres), ("kafka", kafka)):
        if server is not None and not server.is_running():
            await breaker.bring_back(kind, server, server.start)
    breaker.restart_exited()
    async with httpx.AsyncClient(timeout=10) as client:
        await client.delete(f"{stack.sandbox_url}/v1/faults")
    await stack.wait_ready(timeout=180)


async def settle(
    stack: Stack, submitted: list[Submitted], timeout: float, log: Callable[[str], None]
) -> None:
    """Until every answered intent is in the log and every transaction there is terminal
    with nothing in flight, or `timeout` (what is left over is reported as stuck/lost)."""
    answered = {s.tx_id for s in submitted if s.answered_2xx}
    deadline = time.monotonic() + timeout
    while True:
        all_views = views(History((), await collect.read_events(stack), ()))
        missing = answered - {t for t, v in all_views.items() if v.accepted}
        open_ = stuck(all_views)
        if not missing and not open_:
            return
        if time.monotonic() > deadline:
            log(f"  not quiescent after {timeout:.0f}s: {len(missing)} missing, {len(open_)} open")
            return
        await asyncio.sleep(2)


async def gather_history(
    stack: Stack,
    submitted: list[Submitted],
    breaker: nemesis.Nemesis,
    driver: workload.Workload,
) -> History:
    verify_ok, verify_out = await collect.audit_verify(stack)
    compare_ok, compare_out = await collect.audit_rebuild_compare(stack)
    notes = tuple(f"unexpected exit: {e}" for e in breaker.unexpected_exits) + tuple(
        f"intent refused: {r}" for r in driver.refusals
    )
    return History(
        submitted=tuple(submitted),
        events=await collect.read_events(stack),
        effects=await collect.read_effects(stack),
        drift=await collect.read_drift(stack),
        audit_verify_ok=verify_ok,
        audit_verify_output=verify_out,
        rebuild_compare_ok=compare_ok,
        rebuild_compare_output=compare_out,
        notes=notes,
    )
