"""events.safe_json: whatever json.loads returns, the escaped value encodes as UTF-8 JSON
and holds no NUL (what Kafka, pydantic and Postgres need), and a value that needed no
escape is returned unchanged; `escaped_of` spares the walk only where it would change
nothing."""

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from events.safe_json import escape_unencodable, escaped_of, holds_nul

# Every code point, lone surrogates (category Cs) and NUL included.
ANY_TEXT = st.text(st.characters(codec=None, categories=None, exclude_categories=()))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_every_parsed_value_encodes_and_stores_after_escaping(value: Any) -> None:
    # What a provider can send: anything json.loads accepts.
    parsed = json.loads(json.dumps(value))

    escaped = escape_unencodable(parsed)

    json.dumps(escaped, ensure_ascii=False).encode("utf-8")  # raises if a surrogate is left
    assert not any("\x00" in text for text in strings(escaped))


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in strings(item)]
    if isinstance(value, dict):
        return [text for k, v in value.items() for text in [k, *strings(v)]]
    return []


@given(JSON)
def test_a_value_that_needs_no_escape_is_unchanged(value: Any) -> None:
    text = json.dumps(value)
    if "\\ud" in text.lower() or "\\u0000" in text:
        return
    assert escape_unencodable(json.loads(text)) == json.loads(text)


def test_the_escape_is_the_text_of_the_json_escape() -> None:
    parsed = json.loads('{"k\\u0000": ["a\\ud800b", "\\udfff"], "ok": "\\ud83d\\ude00"}')

    assert escape_unencodable(parsed) == {
        "k\\u0000": ["a\\ud800b", "\\udfff"],
        "ok": "\U0001f600",  # a valid pair is one character, kept as it is
    }


@given(JSON, st.booleans(), st.sampled_from(["utf-8", "utf-16", "utf-32-le", "utf-8-sig"]))
def test_the_walk_is_spared_only_where_it_changes_nothing(
    value: Any, ascii_only: bool, encoding: str
) -> None:
    # Any body json.loads reads, in any encoding it detects: escaped_of must equal the walk.
    # Fails when the walk is spared on the \u check alone (a UTF-16 body; tried).
    try:
        body = json.dumps(value, ensure_ascii=ascii_only).encode(encoding)
    except UnicodeEncodeError:
        return  # a lone surrogate written raw: no encoding holds it
    parsed = json.loads(body)

    assert escaped_of(body, parsed) == escape_unencodable(json.loads(body))


@given(JSON, st.booleans())
def test_holds_nul_says_whether_any_string_holds_one(value: Any, ascii_only: bool) -> None:
    # As json.dumps and pydantic write it: a NUL is the escape `\u0000`; the six characters
    # `\u0000` (an escaped backslash before them) are no NUL, however many backslashes lead.
    try:
        body = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8")
    except UnicodeEncodeError:
        return  # a lone surrogate written raw: not JSON a command can be
    assert holds_nul(body) == any("\x00" in text for text in strings(value))


def test_holds_nul_reads_escaped_backslashes() -> None:
    for text, nul in [("a\x00", True), ("\\u0000", False), ("\\\x00", True), ("\\\\u0000", False)]:
        assert holds_nul(TypeAdapter(str).dump_json(text)) is nul, text
