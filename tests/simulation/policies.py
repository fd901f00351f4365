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

In half the schedules with a document the gate's view lags the saves (Gatekeeper._fresh
re-reads a view older than MAX_STALENESS_S): each gate judges by the document in force at
an instant drawn within that bound (`view`). The promise that must still hold is the
bound's: a call begun was allowed by the operator's words at some instant of the last
MAX_STALENESS_S before its gate (`refusal` over `saved`), and a quota in force throughout
them counted it. `_current`'s read of a newer version than the view is not reached: every
submission is checked under the first document.
"""

import bisect
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from events.policy import AgentPolicy, PolicyDocument, Quota, TaskGrant, open_policy
from services.dispatcher.gatekeeper import MAX_STALENESS_S
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
# The share of schedules with a document whose gate judges by a view up to MAX_STALENESS_S
# old (Gatekeeper._fresh) instead of an exact one.
LAG_SHARE = 1 / 2
STALENESS_MS = int(MAX_STALENESS_S * 1000)


@dataclass(frozen=True)
class Words:
    """What the operator's saved document says, in the world's words, from one save on."""

    withdrawn: frozenset[tuple[str, str]]
    task_revoked: bool
    task_expires_ms: int
    task_cap: int | None
    quota: Quota | None


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
    # Every save: when (ms), the document, and its words.
    saved: list[tuple[int, PolicyDocument, Words]] = field(default_factory=list)
    # The gate's view lags the saves (up to STALENESS_MS, drawn at each gate from `lags`);
    # None: the view is exact.
    lags: random.Random | None = None

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
            lags = random.Random(f"lag:{seed}")
            if lags.random() < LAG_SHARE:
                policy.lags = lags
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
        self.saved.append((self.clock.now, self.document, self.words()))

    def words(self) -> Words:
        return Words(
            frozenset(self.withdrawn),
            self.task_revoked,
            self.task_expires_ms,
            self.task_cap,
            self.quota,
        )

    # --- the gate's view (Gatekeeper.refresh, _fresh) -------------------------------

    def view(self) -> PolicyDocument:
        """The document the gate judges by: the one in force now, or, in a lagging schedule,
        the one in force up to STALENESS_MS ago (its view is refreshed once older; the
        document a submission was checked under is the first, so `_current` never reads a
        newer one here)."""
        if self.lags is None:
            return self.document
        return self._saved_at(self.clock.now - self.lags.randint(0, STALENESS_MS))[1]

    def _saved_at(self, at: int) -> tuple[int, PolicyDocument, Words]:
        """The save in force at `at` (the first, for a time before it)."""
        index = bisect.bisect_right([t for t, _, _ in self.saved], at) - 1
        return self.saved[max(index, 0)]

    def _recent(self) -> list[Words]:
        """The words in force at some instant of the gate view's bound: now's alone when
        the view is exact, else those of the last STALENESS_MS too."""
        if not self.saved:
            return [self.words()]  # the open policy, never saved
        now = self.clock.now
        since = now - (STALENESS_MS if self.lags is not None else 0)
        first = self._saved_at(since)
        return [first[2], *(w for t, _, w in self.saved if since < t <= now and w != first[2])]

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
        operator's words (the world's, not the gate's), or None. Where the gate's view may
        lag, allowed if the words of any instant within its bound allowed it (the
        promise a view at most MAX_STALENESS_S old keeps); else why the latest refuse."""
        reasons = [self._refusal(w, operation, payload) for w in self._recent()]
        return None if None in reasons else reasons[-1]

    def _refusal(self, words: Words, operation: str, payload: Mapping[str, object]) -> str | None:
        if ("agent", operation) in words.withdrawn:
            return f"its grant was withdrawn from {AGENT}"
        if self.task_id is None:
            return None
        if words.task_revoked:
            return f"{self.task_id} was revoked"
        if self.clock.now >= words.task_expires_ms:
            return f"{self.task_id} expired at {words.task_expires_ms} ms"
        if ("task", operation) in words.withdrawn:
            return f"its grant was withdrawn from {self.task_id}"
        charged = payload.get("amount") if operation in CHARGES else None
        cap = words.task_cap
        if cap is not None and isinstance(charged, int) and charged > cap:
            return f"{self.task_id} caps one call at {cap}, this one charges {charged}"
        return None

    def quota_covers(self, operation: str) -> bool:
        """Whether a quota counting calls of `operation`, forward or undo, was in force
        (throughout the gate view's bound, where its view may lag: a quota saved since may
        not be in its view yet)."""
        return all(w.quota is not None and w.quota.operation == operation for w in self._recent())

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
