"""Properties of the policy gate (issue 11, acceptance: "no dispatch outside a grant; a quota
is never exceeded whatever the interleaving"), on the pure core every path goes through:
the intake's submission check, the dispatcher's verdict, and the quota reservation the
dispatchers run under one lock per (tenant, agent, operation)."""

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st
from support.catalogs import SANDBOX, SANDBOX_NAMES, sandbox_catalog
from support.txbuilders import spec

from events.catalog import SideEffect
from events.definition import OperationKind
from events.policy import AgentPolicy, PolicyDocument, Quota, open_policy
from services.governance.gate import (
    Claim,
    Named,
    Switch,
    Verdict,
    dispatch_verdict,
    is_granted,
    reserve,
    submission_refusal,
    successor_refusal,
)

OPERATIONS = sorted(SANDBOX_NAMES)
AGENTS = ["agent-1", "agent-2", "agent-3"]
PROVIDERS = ["sandbox", "other"]
CATALOG = sandbox_catalog(*PROVIDERS)


def side_effect_of(operation: str) -> SideEffect:
    return CATALOG.facts("sandbox", operation).side_effect


grants = st.lists(st.sampled_from(OPERATIONS), unique=True).map(tuple)
agent_policies = st.builds(AgentPolicy, grants=grants)
policies = st.builds(
    PolicyDocument,
    version=st.integers(1, 5),
    agents=st.dictionaries(st.sampled_from(AGENTS), agent_policies, max_size=3),
    default=st.none() | agent_policies,
)
switches = st.lists(
    st.builds(
        Switch,
        switch_id=st.sampled_from(["ks_a", "ks_b", "ks_c"]),
        agent_id=st.none() | st.sampled_from(AGENTS),
        provider=st.none() | st.sampled_from(PROVIDERS),
        operation=st.none() | st.sampled_from(OPERATIONS),
    ),
    max_size=3,
)


def granted_in_document(policy: PolicyDocument, agent_id: str, operation: str) -> bool:
    """Read from the document directly, not through the gate's own lookup."""
    rule = policy.agents.get(agent_id, policy.default)
    return operation in (rule.grants if rule else ())


@given(
    policy=policies,
    engaged=switches,
    agent_id=st.sampled_from(AGENTS),
    provider=st.sampled_from(PROVIDERS),
    operation=st.sampled_from(OPERATIONS),
    forward=st.booleans(),
)
def test_no_dispatch_outside_a_grant_nor_under_a_matching_kill_switch(
    policy: PolicyDocument,
    engaged: list[Switch],
    agent_id: str,
    provider: str,
    operation: str,
    forward: bool,
) -> None:
    decision = dispatch_verdict(
        policy,
        engaged,
        agent_id=agent_id,
        provider=provider,
        operation=operation,
        forward=forward,
        side_effect=side_effect_of(operation),
    )
    matching = [s for s in engaged if s.matches(agent_id, provider, operation)]
    if decision.verdict is Verdict.DISPATCH:
        assert not matching
        if forward:
            assert granted_in_document(policy, agent_id, operation) or (
                side_effect_of(operation) is SideEffect.READ
            )
    if matching:
        assert decision.verdict is Verdict.HOLD
        assert set(decision.switches) == {s.switch_id for s in matching}


steps = st.lists(
    st.tuples(st.sampled_from(OPERATIONS), st.none() | st.sampled_from(OPERATIONS)),
    min_size=1,
    max_size=4,
)


@given(policy=policies, agent_id=st.sampled_from(AGENTS), named=steps)
def test_a_submission_passes_only_when_everything_it_names_is_granted(
    policy: PolicyDocument, agent_id: str, named: list[tuple[str, str | None]]
) -> None:
    items = [Named("sandbox", op) for op, _ in named] + [
        Named("sandbox", compensation, compensation_of=op)
        for op, compensation in named
        if compensation is not None
    ]
    refusal = submission_refusal(policy, CATALOG, agent_id, items)
    if refusal is None:
        for op, compensation in named:
            assert granted_in_document(policy, agent_id, op)
            if compensation is not None:
                # A compensation rides on its step's grant only when it is the one the
                # step declares, and not destructive (before issue 18 any operation did).
                assert granted_in_document(policy, agent_id, compensation) or (
                    compensation == CATALOG.compensation_of("sandbox", op)
                    and side_effect_of(compensation) is not SideEffect.DESTRUCTIVE
                )
    else:
        assert not granted_in_document(policy, agent_id, refusal.operation)
        assert refusal.rule in (f"agents.{agent_id}.grants", "default.grants")


def test_a_claimant_must_be_granted_what_the_transaction_still_may_call() -> None:
    # Issue 18, item 8: given a transaction with a charge (refunded if undone) and a
    # receipt, when agents claim it, then only one granted the charge and the email may.
    operations = (
        spec("charge"),
        spec("receipt", OperationKind.ON_COMMIT, "email.send"),
    )
    policy = PolicyDocument(
        version=2,
        agents={
            "agent-1": AgentPolicy(grants=("payments.charge", "email.send")),
            "agent-2": AgentPolicy(grants=("payments.charge",)),
        },
    )
    assert successor_refusal(policy, SANDBOX, "agent-1", operations) is None
    refused = successor_refusal(policy, SANDBOX, "agent-2", operations)
    assert refused is not None and (refused.error, refused.operation) == (
        "not_granted",
        "email.send",
    )
    stranger = successor_refusal(policy, SANDBOX, "agent-9", operations)
    assert stranger is not None and stranger.operation == "payments.charge"


def test_without_a_document_everything_in_the_catalog_is_granted() -> None:
    # Today's behaviour stays the default (README, "Governance").
    policy = open_policy(SANDBOX.names())
    assert all(is_granted(policy, "any-agent", op, side_effect_of(op)) for op in OPERATIONS)


# --- quotas: any interleaving of dispatchers over one ledger -----------------------------


@dataclass
class Ledger:
    """The quota tables, in memory, updated exactly as services.governance.store does
    under its lock: one reservation at a time, in whatever order the dispatchers come."""

    claims: list[Claim] = field(default_factory=list)
    breaker: Quota | None = None
    calls: list[Claim] = field(default_factory=list)  # what reached the provider


quotas = st.lists(
    st.builds(
        Quota,
        operation=st.just("payments.charge"),
        window_s=st.integers(1, 50),
        max_count=st.none() | st.integers(0, 6),
        max_amount=st.none() | st.integers(0, 5000),
    ),
    min_size=1,
    max_size=2,
).map(tuple)
# A dispatch: its key (a few, so re-deliveries and retries of one key happen), its amount.
dispatches = st.tuples(st.integers(0, 30), st.integers(0, 2000))


@given(
    limits=quotas,
    queues=st.lists(st.lists(dispatches, max_size=15), min_size=1, max_size=4),
    schedule=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), max_size=80),
    resets=st.sets(st.integers(0, 80), max_size=3),
)
def test_a_quota_is_never_exceeded_whatever_the_interleaving(
    limits: tuple[Quota, ...],
    queues: list[list[tuple[int, int]]],
    schedule: list[tuple[int, int]],
    resets: set[int],
) -> None:
    ledger = Ledger()
    now = 0.0
    pending = [list(q) for q in queues]
    amounts: dict[str, int] = {}
    for step, (who, pause) in enumerate(schedule):
        now += pause  # time moves on between reservations, windows slide
        if step in resets:
            ledger.breaker = None  # an operator resets the breaker
        queue = pending[who % len(pending)]
        if not queue:
            continue
        key_n, amount = queue.pop(0)
        key = f"k{key_n}"
        amount = amounts.setdefault(key, amount)  # one key, one payload
        decided = reserve(
            already_counted=any(c.op_key == key for c in ledger.claims),
            breaker=ledger.breaker,
            quotas=limits,
            claims=ledger.claims,
            amount=amount,
            now=now,
        )
        if decided.outcome == "counted":
            ledger.claims.append(Claim(key, amount, now))
        elif decided.outcome == "refused":
            ledger.breaker = decided.quota
            continue  # held for review: nothing reaches the provider
        ledger.calls.append(Claim(key, amount, now))

    # Every call that reached the provider was counted, each key once.
    counted = {c.op_key for c in ledger.claims}
    assert {c.op_key for c in ledger.calls} <= counted
    assert len(counted) == len(ledger.claims)
    # And in no window did the counted calls exceed any quota.
    for quota in limits:
        for claim in ledger.claims:
            window = [c for c in ledger.claims if claim.at - quota.window_s < c.at <= claim.at]
            if quota.max_count is not None:
                assert len(window) <= quota.max_count
            if quota.max_amount is not None:
                assert sum(c.amount for c in window) <= quota.max_amount
