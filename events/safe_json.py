"""JSON from outside recon, made safe to encode again and to store (issue 7, item 13).

`json.loads` accepts two things recon cannot pass on: a lone surrogate (`"\\ud800"`), which
is no character, so encoding the text as UTF-8 (pydantic's JSON, Kafka, Postgres) fails;
and NUL (`"\\u0000"`), which Postgres refuses in `jsonb` and `text`. A provider's answer or
webhook is evidence and must be recorded, not refused, so each of them is replaced by the
literal text of its JSON escape (the six characters `\\ud800`): nothing is lost, and the
value encodes everywhere. Everything else is returned unchanged (the same objects when
nothing needed escaping, so the common case costs one scan of the strings, and none when
`escaped_of` sees from the bytes that the body cannot hold either).

Pure: no I/O.
"""

import re
from typing import Any

# A NUL in a JSON string: the escape `\u0000` whose backslash is not itself escaped (an even
# number of backslashes before it; `\\u0000` is the six characters, which Postgres stores).
_NUL_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


def escape_unencodable(value: Any) -> Any:
    """`value` (as json.loads returns it) with every lone surrogate and NUL in its strings,
    object keys included, replaced by the text of its `\\uXXXX` escape."""
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, list):
        return [escape_unencodable(item) for item in value]
    if isinstance(value, dict):
        return {
            escape_text(k) if isinstance(k, str) else k: escape_unencodable(v)
            for k, v in value.items()
        }
    return value


def escaped_of(body: bytes, value: Any) -> Any:
    """`value`, as json.loads read it from `body`, escaped as `escape_unencodable` does; the
    walk over every string is spared for a body that cannot have made a lone surrogate or a
    NUL. It was a tenth of the intake's webhook handling, and of a provider's answer as the
    decider reads it (`Answer.json`) ~2 us of ~5 (a sandbox answer, in-process;
    docs/benchmark.md), for bodies that never need it."""
    return value if _plain(body) else escape_unencodable(value)


def _plain(body: bytes) -> bool:
    """Whether json.loads can have made no lone surrogate and no NUL of `body`: ASCII
    without NUL bytes is read as UTF-8 (json.detect_encoding), where only a `\\u` escape
    makes a character that is not ASCII, and JSON refuses a raw control character in a
    string."""
    return body.isascii() and b"\x00" not in body and b"\\u" not in body


def escape_text(text: str) -> str:
    if "\x00" not in text and _encodable(text):
        return text
    return "".join(
        f"\\u{ord(ch):04x}" if ch == "\x00" or "\ud800" <= ch <= "\udfff" else ch for ch in text
    )


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def holds_nul(body: bytes) -> bool:
    """Whether the JSON `body` has a NUL in a string (JSON can only spell one `\\u0000`).
    A command or an event holding one would be refused by Postgres wherever a projection
    stores its text, at every retry: the intake refuses such a command before producing it,
    and the decider sets aside an input holding one (services.intake.produce, services.
    decider.runtime), so none reaches the log; the projectors set aside one already on it
    (projections.decode)."""
    return b"\\u0000" in body and _NUL_ESCAPE.search(body) is not None
