"""Policies other than the open one (services.governance: the document in force, the task
the intents name, the quota ledger and its breakers), modelled: Postgres tables, so they
survive decider crashes.

The rules are the real ones: the gate's `dispatch_verdict` judges grants and the task (the
simulated gate calls it with this document), `quotas_for` finds the quotas, `reserve`
decides a reservation. What reserve_quota's statements do is restated here, as the SQL
does it: a claim is keyed by the operation's key (quota_claims' primary key is (tenant,
op_key)), the claims of the longest window are read, a refusal trips the operation's
breaker, which stays open until reset, and counting deletes claims older than the longest
window and CLAIM_DEDUPE_S.

The operator changes the document while faults last, in the world's own words (`withdrawn`,
`task_revoked`, `task_expires_ms`, `task_cap`): a grant withdrawn from the agent or from its
task, the task's amount capped below a later step's charge (`TaskGrant.max_amount`, which
the real `task_refusal` judges with the gate's `amount_of` of the payload), the task
revoked, the task let expire, and grants restored; at heal the document grants all
again, the task is granted anew and the quota is lifted and its breaker reset, so every
review the gate raised can be answered with a `retry` that goes through. The checks are
stated in those words, never by asking the rule under test (`refusal`), except for the
quota's count, which is the promise itself (`exceeded`).
"""

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from events.policy import AgentPolicy, PolicyDocument, Quota, TaskGrant, open_policy
from services.governance.gate import Claim, reserve
from services.governance.store import CLAIM_DEDUPE_S
from services.providers.sandbox_operations import SANDBOX_OPERATIONS

from .clock import T0, Clock
from .holds import AGENT
from .invariants import Violation

TASK = "task-1"
# What the operator may withdraw (a read is always allowed, so none of these is one).
WITHDRAWABLE = ("payments.charge", "waitlist.promote", "email.send")
# A quota on the step's charges, or on their undos' refunds (the gate counts undo legs too).
QUOTA_OPERATIONS = ("payments.charge", "payments.refund")
# A task granted anew at heal lasts far beyond any schedule.
FOREVER_MS = 10 * 365 * 86_400_000
# The task's caps on one call the operator sets (tests.simulation.world's steps charge 100,
# 101 and 102: the first passes both, a later step is over one or both); the share of his
# withdrawals, in a schedule with a task, that cap its amount instead.
TASK_CAPS = (100, 101)
CAP_SHARE = 1 / 3
# The operations whose payload's `amount` moves money in the world's words (the sandbox's
# charge; its refund is an undo, which no task judges).
CHARGES = ("payments.charge",)


@dataclass
class SimPolicy:
    clock: Clock
    rng: random.Random
    # False: no document installed (the open policy), nothing below is used.
    governed: bool = False
    document: PolicyDocument = field(default_factory=lambda: open_policy(SANDBOX_OPERATIONS))
    # The task every transaction's intent names, or None.
    task_id: str | None = None
    # (whose grant: "agent" or "task", operation) the operator withdrew.
    withdrawn: set[tuple[str, str]] = field(default_factory=set)
    task_revoked: bool = False
    task_expires_ms: int = FOREVER_MS
    # The most one call under the task may charge, or None.
    task_cap: int | None = None
    quota: Quota | None = None
    # quota_claims: op_key -> (operation, amount, claimed at in ms).
    claims: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    # quota_breakers: operation -> the quota that tripped it.
    breakers: dict[str, Quota] = field(default_factory=dict)

    @classmethod
    def drawn(cls, clock: Clock, seed: int) -> "SimPolicy":
        """A document in one schedule in three, drawn from its own generator so the
        schedules without one are the same as before policies were modelled."""
        rng = random.Random(f"policy:{seed}")
        policy = cls(clock, rng)
        if rng.random() < 1 / 3:
            policy.governed = True
            if rng.random() < 0.5:
                policy.task_id = TASK
                policy.task_expires_ms = rng.choice([FOREVER_MS, rng.randint(0, 60_000)])
            if rng.random() < 0.5:
                window_s = rng.choice([5, 60, 3600])
                max_count = rng.choice([None, 1, 1, 2])
                max_amount = rng.choice([None, 150, 250])
                policy.quota = Quota(
                    operation=rng.choice(QUOTA_OPERATIONS),
                    window_s=window_s,
                    max_count=max_count,
                    max_amount=max_amount,
                )
            policy.install()
        return policy

    # --- the operator's PUT /v1/policy ---------------------------------------------

    def install(self) -> None:
        """The next version, built from the world's words."""
        every = tuple(SANDBOX_OPERATIONS)
        tasks = {}
        if self.task_id is not None and not self.task_revoked:
            tasks[self.task_id] = TaskGrant(
                grants=tuple(o for o in every if ("task", o) not in self.withdrawn),
                max_amount=self.task_cap,
                expires_at=T0 + timedelta(milliseconds=self.task_expires_ms),
            )
        agent = AgentPolicy(
            grants=tuple(o for o in every if ("agent", o) not in self.withdrawn),
            quotas=(self.quota,) if self.quota else (),
        )
        self.document = PolicyDocument(
            version=self.document.version + 1, agents={AGENT: agent}, tasks=tasks
        )

    def withdraw(self) -> None:
        # Drawn only with a task, so a schedule without one withdraws as before.
        if self.task_id and self.rng.random() < CAP_SHARE:
            self.task_cap = self.rng.choice(TASK_CAPS)
            self.install()
            return
        whose = "task" if self.task_id and self.rng.random() < 0.5 else "agent"
        self.withdrawn.add((whose, self.rng.choice(WITHDRAWABLE)))
        self.install()

    def regrant(self) -> None:
        self.withdrawn.clear()
        self.task_cap = None
        self.install()

    def revoke_task(self) -> None:
        self.task_revoked = True
        self.install()

    def expire_task(self) -> None:
        self.task_expires_ms = self.clock.now
        self.install()

    def heal(self) -> bool:
        """Everything granted again, the task anew, the quota lifted and its breaker reset
        (BreakerReset): what a person's `retry` needs to go through. True if it changed."""
        if not self.governed or self._healed():
            return False
        self.withdrawn.clear()
        self.task_revoked = False
        self.task_expires_ms = FOREVER_MS
        self.task_cap = None
        self.quota = None
        self.breakers.clear()
        self.install()
        return True

    def _healed(self) -> bool:
        return (
            not self.withdrawn
            and not self.task_revoked
            and self.task_expires_ms == FOREVER_MS
            and self.task_cap is None
            and self.quota is None
            and not self.breakers
        )

    # --- the checks' words ------------------------------------------------------------

    def refusal(self, operation: str, payload: Mapping[str, object]) -> str | None:
        """Why a forward call of `operation` with `payload` is not allowed now, in the
        operator's words (the world's, not the gate's), or None."""
        if ("agent", operation) in self.withdrawn:
            return f"its grant was withdrawn from {AGENT}"
        if self.task_id is None:
            return None
        if self.task_revoked:
            return f"{self.task_id} was revoked"
        if self.clock.now >= self.task_expires_ms:
            return f"{self.task_id} expired at {self.task_expires_ms} ms"
        if ("task", operation) in self.withdrawn:
            return f"its grant was withdrawn from {self.task_id}"
        charged = payload.get("amount") if operation in CHARGES else None
        if self.task_cap is not None and isinstance(charged, int) and charged > self.task_cap:
            return f"{self.task_id} caps one call at {self.task_cap}, this one charges {charged}"
        return None

    def quota_covers(self, operation: str) -> bool:
        """Whether the quota in force counts calls of `operation`, forward or undo."""
        return self.quota is not None and self.quota.operation == operation

    # --- store.reserve_quota -----------------------------------------------------------

    def reserve(
        self, operation: str, op_key: str, amount: int, quotas: tuple[Quota, ...]
    ) -> Quota | None:
        """Count this dispatch, or the quota it would exceed (its breaker tripped)."""
        now = self.clock.now
        longest = max(q.window_s for q in quotas)
        decided = reserve(
            already_counted=op_key in self.claims,
            breaker=self.breakers.get(operation),
            quotas=quotas,
            claims=self._window(operation, now, longest),
            amount=amount,
            now=now / 1000,
        )
        if decided.outcome == "already":
            return None
        if decided.outcome == "refused":
            assert decided.quota is not None
            self.breakers.setdefault(operation, decided.quota)
            return decided.quota
        oldest = now - int(max(longest, CLAIM_DEDUPE_S) * 1000)
        for key, (op, _, at) in list(self.claims.items()):
            if op == operation and at <= oldest:
                del self.claims[key]
        if op_key in self.claims:  # the primary key: the INSERT fails
            raise Violation(f"{op_key}: counted against the {operation} quota twice")
        self.claims[op_key] = (operation, amount, now)
        self._within(operation, quotas, now)
        return None

    def _window(self, operation: str, now: int, window_s: float) -> list[Claim]:
        since = now - window_s * 1000
        return [
            Claim(key, amount, at / 1000)
            for key, (op, amount, at) in self.claims.items()
            if op == operation and at > since
        ]

    def _within(self, operation: str, quotas: tuple[Quota, ...], now: int) -> None:
        """The quota's promise: the dispatches counted in any window never exceed it."""
        for quota in quotas:
            counted = self._window(operation, now, quota.window_s)
            total = sum(c.amount for c in counted)
            if (quota.max_count is not None and len(counted) > quota.max_count) or (
                quota.max_amount is not None and total > quota.max_amount
            ):
                raise Violation(
                    f"{operation}: {len(counted)} dispatches, {total} in all, counted in "
                    f"{quota.window_s} s, over its quota ({quota.model_dump_json()})"
                )
