"""An operation spec's later fields are left out at their defaults, so a spec without a gate
or a natural key serialises (and hashes, on the chain and in the decider's state) exactly as
before those fields existed, however it is serialised."""

import json

from support.txbuilders import spec

from events.transaction_events import TransactionAccepted, event_data

LATER = {"approval_required", "natural_key", "natural_key_held_by", "facts"}


def test_a_spec_at_its_defaults_has_none_of_the_later_fields() -> None:
    plain = spec("a")
    accepted = TransactionAccepted(agent_id="a", fingerprint="f", operations=(plain,))
    for form in (
        plain.model_dump(),
        plain.model_dump(mode="json"),
        json.loads(plain.model_dump_json()),
        event_data(accepted)["operations"][0],
        json.loads(accepted.model_dump_json())["operations"][0],
    ):
        assert not LATER & set(form)


def test_a_gated_spec_with_a_natural_key_carries_them() -> None:
    gated = spec("a").model_copy(
        update={"approval_required": True, "natural_key": "k", "natural_key_held_by": "tx-0"}
    )
    dumped = json.loads(gated.model_dump_json())
    assert (dumped["approval_required"], dumped["natural_key"]) == (True, "k")
    assert dumped["natural_key_held_by"] == "tx-0"
    assert list(gated.model_dump(mode="json")) == list(dumped)
