"""The sealer's shortcuts leave the chain's hash rule where it was (docs/canonical-form.md):
`seal` hashes with events.canonical's orjson fast path and builds its envelopes without
validating them again (issue 24, S5). Held here against the references themselves, never
against the fast path: rfc8785 for `jcs`, json.dumps (canonical_json) for `legacy-json`,
and pydantic's validation for the envelope, over generated payloads, generated decider
scenarios and the recorded logs in docs/vectors."""

import json
from typing import Any

import rfc8785
from hypothesis import given
from hypothesis import strategies as st
from support.decider_scenarios import run, scenarios
from support.txbuilders import observed, submit

from events.canonical import JCS, canonical_json, jcs, sha256_hex
from events.envelope import Envelope
from events.inputs import Outcome, Source
from services.devtools.audit_vectors import VECTORS
from transactions.transaction import handle, initial_state

# A payload as an agent may write it: the cases that make JCS and orjson differ included.
_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**66), max_value=2**66)
    | st.sampled_from([2**53 - 1, 2**53, -(2**53 - 1), -(2**53)])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1.0, -0.0, 1e16, 1e21, 1e-7])
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=4) | st.sampled_from(["\ue000", "\U0001f600"]), inner)
    ),
    max_leaves=10,
)


def _holds_to_the_reference(envelope: Envelope) -> None:
    content = envelope.model_dump(mode="json", exclude={"hash"})
    if envelope.canon == JCS:
        reference = rfc8785.dumps(content)
    else:
        # Legacy only when JCS cannot hold the content exactly.
        assert envelope.canon is None
        try:
            rfc8785.dumps(content)
            raise AssertionError("sealed legacy-json, yet JCS holds this content")
        except rfc8785.CanonicalizationError:
            reference = canonical_json(content)
    assert sha256_hex(envelope.prev_hash.encode("ascii") + reference) == envelope.hash
    # Built without validation, it is what validating its JSON gives.
    assert Envelope.model_validate_json(envelope.model_dump_json()) == envelope
    assert Envelope.model_validate(envelope.model_dump()) == envelope


@given(st.dictionaries(st.text(max_size=4), _values, max_size=4))
def test_every_sealed_hash_is_the_reference_forms(payload: dict[str, Any]) -> None:
    command = submit(["a", "b"], ("n",), tx_id="tx-any")
    first = command.operations[0].model_copy(update={"payload": payload})
    command = command.model_copy(update={"operations": (first, *command.operations[1:])})
    state, log = initial_state("demo", "tx-any"), []
    for message in (
        command,
        observed("a", 1, Outcome.SUCCEEDED, tx_id="tx-any"),
        observed("a", 0, Outcome.SUCCEEDED, 1, Source.WEBHOOK, tx_id="tx-any"),
        observed("b", 1, Outcome.SUCCEEDED, 2, tx_id="tx-any"),
    ):
        state, envelopes = handle(state, message)
        log += envelopes
    assert log
    for envelope in log:
        _holds_to_the_reference(envelope)


@given(scenarios())
def test_every_event_of_a_decider_scenario_is_sealed_as_the_reference_seals(
    inputs: list[Any],
) -> None:
    _, log = run(inputs)
    for envelope in log:
        _holds_to_the_reference(envelope)


def test_the_recorded_logs_spell_as_the_reference() -> None:
    # Logs the decider wrote (the audit vectors' bundles, and the log sealed before forms
    # were named): the fast path gives rfc8785's bytes for every event in them.
    logs = [json.loads(p.read_text(encoding="utf-8")) for p in (VECTORS / "bundles").glob("*.json")]
    events = [e for log in logs for e in log.get("events", [])]
    lines = (VECTORS / "legacy-log.jsonl").read_text(encoding="utf-8").splitlines()
    events += [json.loads(line) for line in lines]
    assert len(events) >= 50
    for event in events:
        content = {k: v for k, v in event.items() if k != "hash"}
        assert jcs(content) == rfc8785.dumps(content)
