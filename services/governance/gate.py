"""Pure: the policy gate, one set of rules for every path that may start a dispatch.

- Grants (`submission_refusal`, at the intake): every operation a submission names must be
  granted to its agent, unless it is a `read`. A step's compensation is granted with the step
  (undoing what was allowed must stay possible) only when it is the one undo the step's
  operation declares (its provider's catalog) and not `destructive`; anything else named as an undo
  needs its own grant (and the intake refuses it anyway: `compensation_not_allowed`).
- The same rules at the dispatcher (`dispatch_verdict`), for submissions, saga compensations
  and review retries alike, because a policy may change after a submission was accepted: a
  forward leg no longer granted is held for a person (`not_granted`); an undo is never
  refused by a grant (it was checked when declared, and refusing it would leave a saga half
  done). A kill switch matching the dispatch holds it, whatever the leg.
- Tasks (`task_refusal`, issue 22 item 2): a submission that names a task may only ask for
  what the task's grant (events.policy.TaskGrant) allows, on top of its agent's grants: its
  operations, at most its amount per call, until its expiry. The dispatcher re-judges the
  same rule right before each forward call (`dispatch_verdict`), so a task revoked (removed
  from the document) or expired after the submission stops every call not yet made.
- Quotas (`quota_refusal`), for forward legs and undos alike (an undo is a call like any
  other, and a refund moves money): given the claims already counted in the windows, would one more
  dispatch of this amount exceed any quota? The caller evaluates it under a lock that
  serialises every reservation of one (tenant, agent, operation), so any interleaving of
  dispatchers is one sequence of these decisions (services.governance.store).
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events.catalog import Catalog, SideEffect
from events.definition import OperationSpec
from events.policy import PolicyDocument, Quota
from events.str_enum import StrEnum


@dataclass(frozen=True)
class Refusal:
    """Why the gate refused: the rule (its path in the policy document) and what it covers."""

    error: str  # `not_granted`, `task_unknown`, `task_expired`
    rule: str
    agent_id: str
    operation: str
    side_effect: str
    policy_version: int
    message: str

    def body(self) -> dict[str, Any]:
        return {
            "error": self.error,
            "message": self.message,
            "rule": self.rule,
            "agent_id": self.agent_id,
            "operation": self.operation,
            "class": self.side_effect,
            "policy_version": self.policy_version,
        }


def is_granted(
    policy: PolicyDocument, agent_id: str, operation: str, side_effect: SideEffect
) -> bool:
    """Whether `agent_id` may call `operation`, of class `side_effect` (its provider's
    word: the catalog at the door, the facts the events recorded at the dispatcher)."""
    if side_effect is SideEffect.READ:
        return True
    _, agent = policy.for_agent(agent_id)
    return operation in agent.grants


def grant_refusal(
    policy: PolicyDocument,
    catalog: Catalog,
    agent_id: str,
    provider: str,
    operation: str,
    *,
    compensation_of: str | None = None,
) -> Refusal | None:
    """None when `agent_id` may dispatch `operation` at `provider` (as the compensation of
    `compensation_of`, if given). An operation the catalog does not know is taken for the
    most dangerous class (events.catalog.UNDECLARED)."""
    side_effect = catalog.facts(provider, operation).side_effect
    if is_granted(policy, agent_id, operation, side_effect):
        return None
    if (
        compensation_of is not None
        and operation == catalog.compensation_of(provider, compensation_of)
        and side_effect is not SideEffect.DESTRUCTIVE
        and is_granted(
            policy, agent_id, compensation_of, catalog.facts(provider, compensation_of).side_effect
        )
    ):
        return None  # implied by the step's grant: the one compensation the step declares
    rule, _ = policy.for_agent(agent_id)
    what = f"the compensation of {compensation_of!r}, " if compensation_of else ""
    return Refusal(
        error="not_granted",
        rule=f"{rule}.grants",
        agent_id=agent_id,
        operation=operation,
        side_effect=side_effect.value,
        policy_version=policy.version,
        message=(
            f"policy version {policy.version}: {rule}.grants does not grant {operation!r} "
            f"({what}a {side_effect.value} operation) to agent {agent_id!r}; an operator must "
            "grant it (PUT /v1/policy) before this agent may ask for it"
        ),
    )


def task_refusal(
    policy: PolicyDocument,
    task_id: str,
    *,
    agent_id: str,
    operation: str,
    side_effect: SideEffect,
    amount: int | None,
    now: datetime,
) -> Refusal | None:
    """None when the task `task_id` allows calling `operation` (of class `side_effect`) with
    `amount` (amount_of the payload) at `now`. The one judge of a task's grant, at the door
    and right before the call. Reads are allowed, as for agents; an amount the task's cap
    cannot read is refused (the provider may still read it as money)."""
    rule = f"tasks.{task_id}"
    task = policy.tasks.get(task_id)

    def refused(error: str, path: str, why: str) -> Refusal:
        return Refusal(
            error=error,
            rule=path,
            agent_id=agent_id,
            operation=operation,
            side_effect=side_effect.value,
            policy_version=policy.version,
            message=(
                f"policy version {policy.version}: {why}; an operator must grant the task "
                "(PUT /v1/policy) before it may ask for this"
            ),
        )

    if task is None:
        return refused("task_unknown", rule, f"{rule} is not granted (never granted, or revoked)")
    if task.expired(now):
        return refused(
            "task_expired", f"{rule}.expires_at", f"{rule} expired at {task.expires_at.isoformat()}"
        )
    if side_effect is not SideEffect.READ and operation not in task.grants:
        return refused(
            "not_granted",
            f"{rule}.grants",
            f"{rule}.grants does not grant {operation!r} (a {side_effect.value} operation)",
        )
    if task.max_amount is not None and (amount is None or amount > task.max_amount):
        return refused(
            "not_granted",
            f"{rule}.max_amount",
            f"{rule}.max_amount caps one call at {task.max_amount}; this one asks for "
            + ("an amount it cannot read" if amount is None else str(amount)),
        )
    return None


@dataclass(frozen=True)
class Named:
    """An operation a submission names at `provider`; `compensation_of` is set for a step's
    compensation. `amount`: amount_of its payload (a compensation's is derived: 0)."""

    provider: str
    operation: str
    compensation_of: str | None = None
    amount: int | None = 0


def submission_refusal(
    policy: PolicyDocument,
    catalog: Catalog,
    agent_id: str,
    named: Iterable[Named],
    *,
    task_id: str | None = None,
    now: datetime | None = None,
) -> Refusal | None:
    """The first operation of the submission its agent (or, when it names one, its task:
    `task_id`, judged at `now`) is not granted, or None. A step's compensation is within
    the task when its step is, as for agents (grant_refusal): undoing stays possible."""
    items = list(named)
    for item in items:
        refusal = grant_refusal(
            policy,
            catalog,
            agent_id,
            item.provider,
            item.operation,
            compensation_of=item.compensation_of,
        )
        if refusal is not None:
            return refusal
    if task_id is None:
        return None
    if now is None:
        raise ValueError("a task is judged at a time: pass `now`")
    for item in items:
        if (
            item.compensation_of is not None
            and item.operation == catalog.compensation_of(item.provider, item.compensation_of)
            and catalog.facts(item.provider, item.operation).side_effect
            is not SideEffect.DESTRUCTIVE
        ):
            continue  # implied by its step's task grant, judged in this loop too
        refusal = task_refusal(
            policy,
            task_id,
            agent_id=agent_id,
            operation=item.operation,
            side_effect=catalog.facts(item.provider, item.operation).side_effect,
            amount=item.amount,
            now=now,
        )
        if refusal is not None:
            return refusal
    return None


def successor_refusal(
    policy: PolicyDocument, catalog: Catalog, agent_id: str, operations: Iterable[OperationSpec]
) -> Refusal | None:
    """The first operation of an accepted transaction that `agent_id` is not granted, or
    None: an agent that claims a transaction takes over every call it may still cause (its
    steps, their undos, its notifications), so it must be granted them as its submitter
    was (issue 18, item 8). The one judge of a claim's grant; the agent id is the one the
    claim carries."""
    return submission_refusal(
        policy,
        catalog,
        agent_id,
        [
            named
            for spec in operations
            for named in (
                (Named(spec.provider, spec.operation),)
                + (
                    (
                        Named(
                            spec.provider,
                            spec.compensation.operation,
                            compensation_of=spec.operation,
                        ),
                    )
                    if spec.compensation is not None
                    else ()
                )
            )
        ],
    )


# --- kill switches ------------------------------------------------------------------


SCOPE_FIELDS = ("agent_id", "provider", "operation")


@dataclass(frozen=True)
class Switch:
    """An engaged kill switch of one tenant. Fields left None match anything, so an empty
    scope stops the whole tenant."""

    switch_id: str
    agent_id: str | None = None
    provider: str | None = None
    operation: str | None = None

    def matches(self, agent_id: str, provider: str, operation: str) -> bool:
        return (
            self.agent_id in (None, agent_id)
            and self.provider in (None, provider)
            and self.operation in (None, operation)
        )


def blocking(
    switches: Iterable[Switch], agent_id: str, provider: str, operation: str
) -> tuple[str, ...]:
    """The ids of the engaged switches that stop this dispatch."""
    return tuple(sorted(s.switch_id for s in switches if s.matches(agent_id, provider, operation)))


# --- the dispatcher's verdict ---------------------------------------------------------


class Verdict(StrEnum):
    DISPATCH = "dispatch"  # go on (a quota, if any, is reserved next)
    HOLD = "hold"  # a kill switch: keep it, dispatch it once released
    REVIEW = "review"  # a person decides (the reason says why)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str = ""
    switches: tuple[str, ...] = ()


def dispatch_verdict(
    policy: PolicyDocument,
    switches: Iterable[Switch],
    *,
    agent_id: str,
    provider: str,
    operation: str,
    forward: bool,
    side_effect: SideEffect,
    task_id: str | None = None,
    amount: int | None = 0,
    now: datetime | None = None,
) -> Decision:
    """`side_effect`: the class the events recorded for the call (events.legacy_facts).
    `task_id`: the task the intent acts under (its authority), judged at `now` with the
    call's `amount`; a forward leg outside it (revoked, expired, not granted) goes to a
    person with the refusal's error as reason (`task_unknown`, `task_expired`,
    `not_granted`). Undo legs are never refused by a task, as by grants."""
    held_by = blocking(switches, agent_id, provider, operation)
    if held_by:
        return Decision(Verdict.HOLD, "kill_switch", held_by)
    if forward and not is_granted(policy, agent_id, operation, side_effect):
        return Decision(Verdict.REVIEW, "not_granted")
    if forward and task_id is not None:
        if now is None:
            raise ValueError("a task is judged at a time: pass `now`")
        refusal = task_refusal(
            policy,
            task_id,
            agent_id=agent_id,
            operation=operation,
            side_effect=side_effect,
            amount=amount,
            now=now,
        )
        if refusal is not None:
            return Decision(Verdict.REVIEW, refusal.error)
    return Decision(Verdict.DISPATCH)


# --- quotas -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """One dispatch counted against a quota: its key, its amount, when (seconds)."""

    op_key: str
    amount: int
    at: float


def quotas_for(policy: PolicyDocument, agent_id: str, operation: str) -> tuple[Quota, ...]:
    _, agent = policy.for_agent(agent_id)
    return tuple(q for q in agent.quotas if q.operation == operation)


def amount_of(payload: Mapping[str, Any], field: str | None = "amount") -> int | None:
    """The amount a dispatch counts against `max_amount`: the payload's integer `field`
    (minor units; the operation's declared `amount_field`), 0 when it has none or the
    operation moves no money (`field` None), None when it has one that is not a
    non-negative JSON integer (a string, a float, a boolean): the provider may still read
    that as money, so a quota on amounts cannot count it and must refuse it
    (`amount_unreadable`)."""
    if field is None or field not in payload:
        return 0
    amount = payload[field]
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
        return None
    return amount


def counts_amount(quotas: Sequence[Quota]) -> bool:
    """Whether any of these quotas caps the amount (and so needs one it can read)."""
    return any(q.max_amount is not None for q in quotas)


def quota_refusal(
    quotas: Sequence[Quota], claims: Sequence[Claim], amount: int, now: float
) -> Quota | None:
    """The first quota one more dispatch of `amount` at `now` would exceed, or None. The
    window is sliding: the claims of the last `window_s` seconds count."""
    for quota in quotas:
        recent = [c for c in claims if c.at > now - quota.window_s]
        if quota.max_count is not None and len(recent) + 1 > quota.max_count:
            return quota
        if quota.max_amount is not None and sum(c.amount for c in recent) + amount > (
            quota.max_amount
        ):
            return quota
    return None


@dataclass(frozen=True)
class Reservation:
    """What one reservation does: `counted` (claim this key), `already` (the key was counted
    before: a re-delivered dispatch, a retry), or refused by `quota` (the breaker trips, or
    stays open)."""

    outcome: str  # "counted" | "already" | "refused"
    quota: Quota | None = None


def reserve(
    *,
    already_counted: bool,
    breaker: Quota | None,
    quotas: Sequence[Quota],
    claims: Sequence[Claim],
    amount: int,
    now: float,
) -> Reservation:
    """One reservation, decided from what the ledger holds (under the caller's lock)."""
    if already_counted:
        return Reservation("already")
    if breaker is not None:
        return Reservation("refused", breaker)  # a tripped breaker stays open until reset
    refused = quota_refusal(quotas, claims, amount, now)
    if refused is not None:
        return Reservation("refused", refused)
    return Reservation("counted")
