"""Policy as data and grants at the gate (issue 11, items 2 and 7): a document loaded from
RECON_POLICY_FILE at start-up, replaced by an operator through the API (stale versions
refused), every change on recon.governance; a submission naming an operation its agent is
not granted is refused with 403 naming the rule, and nothing reaches Kafka; a grant revoked
after acceptance is enforced at the dispatcher (held for review, nothing sent).
"""

import json
from pathlib import Path

from support.governance_support import (
    AGENT,
    OPERATOR,
    command_tx_ids,
    governance_log,
    hold_agent_7,
    put_policy,
    until,
)
from support.recon_client import op, transaction
from support.stack_fixtures import StackWith

GRANTS = ["inventory.reserve", "payments.charge", "email.send"]


async def test_ungranted_operation_is_refused_with_403_naming_the_rule_and_nothing_in_kafka(
    stack_with: StackWith,
    tmp_path: Path,
) -> None:
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(
        json.dumps({"demo": {"version": 1, "agents": {"agent-7": {"grants": GRANTS}}}})
    )
    async with stack_with(RECON_POLICY_FILE=str(policy_file)) as (stack, recon):
        http, url = recon.http, stack.intake_url
        # The file's document is in force; anyone of the tenant may read it.
        policy = (await http.get(f"{url}/v1/policy", headers=AGENT)).json()
        assert policy["version"] == 1 and policy["configured"] is True
        assert policy["document"]["agents"]["agent-7"]["grants"] == GRANTS

        # An agent the policy does not name may only read: refused, nothing recorded.
        stranger = {**transaction("gate-stranger"), "agent_id": "agent-9"}
        refused = await recon.submit(stranger)
        assert refused.status_code == 403, refused.text
        body = refused.json()
        assert body["error"] == "not_granted"
        assert body["rule"] == "default.grants"
        assert (body["operation"], body["class"]) == ("inventory.reserve", "write")
        assert body["policy_version"] == 1

        # Only operators set policy; a stale version is refused.
        v2 = {"version": 2, "agents": {"agent-7": {"grants": GRANTS[:2]}}}
        as_agent = await http.put(f"{url}/v1/policy", json=v2, headers=AGENT)
        assert as_agent.status_code == 403 and as_agent.json()["error"] == "operator_only"
        stale = await put_policy(http, url, {**v2, "version": 1})
        assert stale.status_code == 409 and stale.json()["error"] == "stale_version"
        replaced = await put_policy(http, url, v2)
        assert replaced.status_code == 200, replaced.text
        assert replaced.json()["version"] == 2

        # The receipt (email.send) is no longer granted to agent-7.
        refused = await recon.submit(transaction("gate-no-email"))
        assert refused.status_code == 403, refused.text
        body = refused.json()
        assert (body["rule"], body["operation"]) == ("agents.agent-7.grants", "email.send")
        # Its steps' compensations (release, refund) are granted with the steps.
        allowed = await recon.submit(transaction("gate-allowed", receipt=False))
        assert allowed.status_code == 202, allowed.text
        assert (await recon.wait_terminal("gate-allowed"))["status"] == "committed"

        # Nothing of the refused submissions anywhere: not in Kafka, not readable.
        named = await command_tx_ids(stack.kafka_bootstrap, stack.topic_prefix)
        assert "gate-allowed" in named
        assert not {"gate-stranger", "gate-no-email"} & named
        for tx_id in ("gate-stranger", "gate-no-email"):
            assert (await recon.get(tx_id)).status_code == 404
            events = await http.get(f"{url}/v1/transactions/{tx_id}/events", headers=AGENT)
            assert events.status_code == 404

        # The same gate at the dispatcher, for a policy changed after acceptance: a
        # transaction accepted while a kill switch holds agent-7 loses its charge grant
        # before the switch is released. The reserve (still granted) runs, the charge
        # is held for a person and never reaches the provider.
        switch_id = await hold_agent_7(http, stack, "policy review")
        assert (await recon.submit(transaction("gate-revoked", receipt=False))).status_code == 202

        async def held() -> bool:
            listed = (await http.get(f"{url}/v1/kill-switches", headers=AGENT)).json()
            return bool(listed["kill_switches"][0]["held"] == 1)

        await until(held, "the reserve held by the switch")
        v3 = {"version": 3, "agents": {"agent-7": {"grants": ["inventory.reserve"]}}}
        assert (await put_policy(http, url, v3)).status_code == 200
        released = await http.delete(f"{url}/v1/kill-switches/{switch_id}", headers=OPERATOR)
        assert released.status_code == 200
        tx = await recon.wait_terminal("gate-revoked")
        assert tx["status"] == "manual_review"
        assert op(tx, "reserve")["state"] == "confirmed"
        assert op(tx, "charge")["state"] == "manual_review"
        assert await recon.calls(op(tx, "charge")["op_key"]) == []
        reviews = (await http.get(f"{url}/v1/reviews", headers=AGENT)).json()["reviews"]
        assert [(r["tx_id"], r["reason"]) for r in reviews] == [("gate-revoked", "not_granted")]

        # Every change is on the log, with who made it.
        changes = await governance_log(stack.kafka_bootstrap, stack.topic_prefix)
        assert [(c["type"], c.get("version"), c["actor"]) for c in changes] == [
            ("PolicyReplaced", 1, f"file:{policy_file}"),
            ("PolicyReplaced", 2, "operator"),
            ("KillSwitchEngaged", None, "operator"),
            ("PolicyReplaced", 3, "operator"),
            ("KillSwitchReleased", None, "operator"),
        ]
