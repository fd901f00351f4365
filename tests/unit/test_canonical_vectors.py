"""The canonical form of the hash chain (docs/canonical-form.md): the published vectors are
what the code produces, JCS is what new events are hashed in, and a log written before the
form was named still verifies in the legacy form."""

import json
from collections.abc import Callable
from enum import IntEnum, StrEnum
from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st
from support.txbuilders import log_of, observed, submit

from events.canonical import (
    JCS,
    LEGACY,
    canonical_bytes,
    canonical_json,
    form_name,
    jcs,
    sha256_hex,
)
from events.chain_link import read_link
from events.envelope import Envelope, verify_chain
from events.inputs import Outcome
from services.devtools.audit_vectors import VECTORS, rendered
from transactions.transaction import handle, initial_state


def _log() -> list[Envelope]:
    return log_of(
        submit(["a", "b"], ("n",), tx_id="tx-jcs"),
        observed("a", 1, Outcome.SUCCEEDED, tx_id="tx-jcs"),
        observed("b", 1, Outcome.SUCCEEDED, 1, tx_id="tx-jcs"),
        tx_id="tx-jcs",
    )


def test_the_checked_in_vectors_are_what_the_code_generates() -> None:
    # The bundles themselves are data (a transaction as the decider wrote it when they were
    # made): frozen as checked in, and held to their verdicts by test_bundle_vectors.py and
    # verifier-go. What a change of code must not move silently: the canonical bytes and keys.
    for name, text in rendered().items():
        if name.startswith("bundles/") and name != "bundles/keys.json":
            continue
        assert (VECTORS / name).read_text(encoding="utf-8") == text, (
            f"docs/vectors/{name} is stale: run `uv run python -m services.devtools.audit_vectors`"
        )


def test_every_canonical_vector_holds() -> None:
    cases = json.loads((VECTORS / "canonical.json").read_text(encoding="utf-8"))["cases"]
    assert len(cases) >= 8
    for case in cases:
        out = jcs(json.loads(case["input"]))
        assert out.decode("utf-8") == case["canonical"], case["name"]
        assert sha256_hex(out) == case["sha256"], case["name"]


def test_new_events_name_jcs_and_are_hashed_in_it() -> None:
    log = _log()
    assert verify_chain(log) == []
    for env in log:
        assert env.canon == JCS
        content = env.model_dump(mode="json", exclude={"hash"})
        assert content["canon"] == JCS
        assert sha256_hex(env.prev_hash.encode() + jcs(content)) == env.hash


def test_a_log_written_before_canonical_forms_still_verifies_as_legacy_json() -> None:
    lines = (VECTORS / "legacy-log.jsonl").read_text(encoding="utf-8").splitlines()
    log = [Envelope.model_validate_json(line) for line in lines]
    assert len(log) == 7
    assert verify_chain(log) == []
    assert {form_name(env.canon) for env in log} == {LEGACY}
    # Read back and written out again, an old envelope gains no `canon`: its hash holds.
    assert [env.model_dump_json() for env in log] == lines
    # The auditor's fast reading agrees.
    links = [read_link(line.encode()) for line in lines]
    assert all(link is not None and link.hash_matches() for link in links)


def test_removing_or_changing_canon_breaks_the_link() -> None:
    env = _log()[0]
    body = env.model_dump(mode="json")
    stripped = {k: v for k, v in body.items() if k != "canon"}
    assert not Envelope.model_validate(stripped).hash_matches()
    assert read_link(json.dumps(stripped).encode()) is not None
    assert not read_link(json.dumps(stripped).encode()).hash_matches()  # type: ignore[union-attr]


def test_an_unknown_canonical_form_is_unverifiable_not_invalid() -> None:
    log = _log()
    other = Envelope.model_validate({**log[0].model_dump(mode="json"), "canon": "jcs-2"})
    problems = verify_chain([other, *log[1:]])
    assert [(p.seq, p.unverifiable) for p in problems] == [(1, True)]
    assert "'jcs-2' is not supported" in str(problems[0])


def test_an_integer_jcs_cannot_hold_is_sealed_in_the_legacy_form() -> None:
    command = submit(["a"], tx_id="tx-big")
    ops = command.operations
    huge = ops[0].model_copy(update={"payload": {"amount": 2**60}})
    command = command.model_copy(update={"operations": (huge,)})
    _, log = handle(initial_state("demo", "tx-big"), command)
    accepted = log[0]
    assert accepted.canon is None  # legacy-json: it keeps all the digits
    assert verify_chain(log) == []
    for env in log:  # only the events holding the integer
        assert (env.canon is None) == (str(2**60) in env.model_dump_json())
    content = accepted.model_dump(mode="json", exclude={"hash"})
    assert sha256_hex(accepted.prev_hash.encode() + canonical_bytes(None, content)) == (
        accepted.hash
    )


class _Name(StrEnum):
    A = "a"
    E = "\u00e9"


class _Count(IntEnum):
    BIG = 2**53


# What a JSON value can hold, and what the fast path must leave to rfc8785: floats of every
# kind (1.0 and 1e16 print otherwise in orjson, NaN and infinities are refused), integers on
# both sides of +-(2**53 - 1) and past 64 bits (orjson's own limit), text with lone
# surrogates (orjson and rfc8785 both refuse it), names that sort otherwise by UTF-16 unit
# than by code point (U+E000 after U+1F600), tuples, str and int subclasses, and a type
# JSON does not have.
_text = st.text(st.characters(exclude_categories=()), max_size=6) | st.sampled_from(
    ["", "a", "\ue000", "\U0001f600", "\ud800", "x\udfffy", "\x00\x1f\x7f", "\u2028"]
)
_numbers = (
    st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([2**53 - 1, 2**53, -(2**53 - 1), -(2**53), 2**63, -(2**64)])
    | st.floats()
    | st.sampled_from([1.0, -0.0, 1e16, 1e21, 1e-7, 5e-324, 0.1])
)
_json = st.recursive(
    st.none()
    | st.booleans()
    | _numbers
    | _text
    | st.sampled_from([_Name.A, _Name.E, _Count.BIG, {1, 2}]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_text | st.sampled_from([_Name.A, _Name.E]), inner, max_size=4)
    ),
    max_leaves=12,
)


def _spelled(canonical: Callable[[Any], bytes], value: Any) -> bytes | str:
    try:
        return canonical(value)
    except (ValueError, TypeError) as error:  # CanonicalizationError, UnicodeEncodeError
        return f"refused: {type(error).__name__}"  # (a lone surrogate), an unknown type


def _legacy_reference(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


@given(_json)
def test_the_fast_jcs_is_the_reference_jcs(value: Any) -> None:
    # events.canonical.jcs takes orjson for the values it proves it spells the same: the
    # same bytes as rfc8785, or refused as rfc8785 refuses it.
    assert _spelled(jcs, value) == _spelled(rfc8785.dumps, value)


@given(_json)
def test_the_fast_legacy_form_is_json_dumps(value: Any) -> None:
    # canonical_json (ids, fingerprints, the legacy chain) takes the same fast path.
    assert _spelled(canonical_json, value) == _spelled(_legacy_reference, value)


@pytest.mark.parametrize(
    "value",
    [
        {"\ue000": 1, "\U0001f600": 2, "a": 3},  # UTF-16 order is not code point order
        {"b": {"\u00e9": [1.0, 1e16]}, "a": "\u00e9"},
        [2**53 - 1, -(2**53 - 1)],
        [2**53],
        [-(2**53)],
        [2**64],
        {"a": ["\ud800"]},  # a lone surrogate, refused by both
        {"\udfff": 1},
        [float("nan")],
        [float("inf")],
        {_Name.E: _Count.BIG, _Name.A: (1, "x")},
        {_Name.A: 1},  # a name orjson refuses
        {"set": {1}},
        {1: "a name that is not a string"},
    ],
)
def test_the_fast_path_agrees_on_the_cases_that_made_the_walk_necessary(value: Any) -> None:
    assert _spelled(jcs, value) == _spelled(rfc8785.dumps, value)
    assert _spelled(canonical_json, value) == _spelled(_legacy_reference, value)


def test_the_fast_path_agrees_on_every_ascii_character_and_beyond() -> None:
    text = "".join(chr(i) for i in range(0x80)) + "\u2028\u2029\ud7ff\ue000\uffff\U0001f600"
    value: Any = {text.encode("ascii", "ignore").decode(): [text, 2**53 - 1, -(2**53 - 1), True]}
    assert jcs(value) == rfc8785.dumps(value)
    assert canonical_json(value) == _legacy_reference(value)
