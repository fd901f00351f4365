"""RECON_API_KEYS binds an agent key to the agents it speaks for ("key=tenant:a|b"): grants,
quotas and ownership key on the agent, so the agent comes from the credential, never only
from the body. A key naming no agent keeps speaking for any agent of its tenant (the
out-of-the-box `demo-key`)."""

import pytest

from services.config import ConfigError, load_settings
from services.intake.auth import Principal, principal_for
from services.intake.errors import ApiError


def bound(monkeypatch: pytest.MonkeyPatch, value: str) -> dict[str, Principal]:
    monkeypatch.setenv("RECON_API_KEYS", value)
    monkeypatch.delenv("RECON_OPERATOR_KEYS", raising=False)
    s = load_settings()
    return {
        key: principal_for(f"Bearer {key}", s.api_keys, s.operator_keys, s.key_agents)
        for key in (*s.api_keys, *s.operator_keys)
    }


def test_a_key_naming_its_agents_speaks_for_those_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # given a key bound to two agents
    keys = bound(monkeypatch, "bot-key=demo:agent-7|agent-8,any-key=demo")
    bot = keys["bot-key"]
    assert bot == Principal("demo", agents=frozenset({"agent-7", "agent-8"}))
    # when it names one of them, it passes; when it names another agent, it is refused
    bot.speak_for("agent-7")
    bot.speak_for(None)  # an abort that names no agent
    with pytest.raises(ApiError) as refused:
        bot.speak_for("agent-with-the-grant")
    assert (refused.value.status, refused.value.code) == (403, "agent_not_bound")
    # then a key naming none speaks for any agent of its tenant
    keys["any-key"].speak_for("whoever")


def test_the_principal_names_the_operator_not_the_agent_it_submitted_as(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys = bound(monkeypatch, "bot-key=demo:agent-7")
    assert keys["ops-key"].name == "operator:operator"
    assert keys["bot-key"].name == "agent:agent-7"


@pytest.mark.parametrize("value", ["k=demo:", "k=demo:|", "k=de mo:agent-7", f"k=demo:{'a' * 129}"])
def test_a_malformed_agent_binding_stops_the_process(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("RECON_API_KEYS", value)
    with pytest.raises(ConfigError, match="RECON_API_KEYS"):
        load_settings()


def test_out_of_the_box_demo_key_speaks_for_any_demo_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RECON_API_KEYS", raising=False)
    s = load_settings()
    assert s.key_agents == {}
    principal_for("Bearer demo-key", s.api_keys, s.operator_keys, s.key_agents).speak_for("agent-7")
