"""Loading a provider file: every mistake is refused at start-up naming the file and the
line (`acme.toml:14: operations."payments.charge".method: ...`).

tomllib keeps no positions, so the lines of keys are found by a scan of the text
(`key_lines`): table headers (`[a.b]`, `[[a]]`, counted) and `key = ` lines, dotted and
quoted keys included. A validation error's location is matched to the longest known
prefix: a missing key points at its table, a bad value at its own line.
"""

import re
import tomllib
from pathlib import Path

from pydantic import ValidationError

from services.providers.declared.model import ProviderFile

Loc = tuple[str | int, ...]
_HEADER = re.compile(r"^\s*(\[\[?)\s*(.+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(
    r"""^\s*((?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*'))*)\s*="""
)
_PART = re.compile(r"""[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*'""")
_STRING = re.compile(r""""(?:[^"\\]|\\.)*"|'[^']*'""")
_AT_LINE = re.compile(r"\(at line (\d+), column \d+\)")


class DeclarationError(ValueError):
    """The provider file cannot be used; the message names its file and line."""


def _parts(dotted: str) -> list[str]:
    out = []
    for token in _PART.findall(dotted):
        if token[0] in "\"'":
            token = (
                token[1:-1].encode().decode("unicode_escape") if token[0] == '"' else token[1:-1]
            )
        out.append(token)
    return out


def key_lines(text: str) -> dict[Loc, int]:
    """Each key's (and table's) path -> the line it is written on (1-based)."""
    lines: dict[Loc, int] = {}
    table: Loc = ()
    counts: dict[Loc, int] = {}
    depth = 0  # inside a multi-line array or inline table: its keys are the outer key's
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if depth == 0 and (header := _HEADER.match(line)) and not _KEY.match(line):
            path = tuple(_parts(header.group(2)))
            if header.group(1) == "[[":
                index = counts.get(path, 0)
                counts[path] = index + 1
                table = (*path, index)
                lines.setdefault(path, number)
            else:
                table = path
            lines.setdefault(table, number)
            continue
        if depth == 0 and (key := _KEY.match(line)):
            lines.setdefault((*table, *_parts(key.group(1))), number)
        if not stripped.startswith("#"):
            # Brackets inside strings or comments open nothing.
            code = _STRING.sub('""', line).split("#", 1)[0]
            depth = max(
                0, depth + code.count("[") + code.count("{") - code.count("]") - code.count("}")
            )
    return lines


def line_of(lines: dict[Loc, int], loc: Loc) -> int:
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1


def _where(loc: Loc) -> str:
    shown = []
    for part in loc:
        if isinstance(part, int):
            shown.append(f"[{part}]")
        else:
            text = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else f'"{part}"'
            shown.append(("." if shown else "") + text)
    return "".join(shown) or "(the file)"


def parse(text: str, name: str) -> ProviderFile:
    """The provider file `text` (named `name` in errors), validated."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        at = _AT_LINE.search(str(error))
        line = at.group(1) if at else "1"
        raise DeclarationError(
            f"{name}:{line}: not valid TOML: {_AT_LINE.sub('', str(error)).strip()}"
        ) from None
    lines = key_lines(text)
    try:
        declared = ProviderFile.model_validate(raw)
    except ValidationError as error:
        raise DeclarationError(
            "\n".join(
                _message(name, lines, tuple(e["loc"]), e["msg"], e.get("input"), e["type"])
                for e in error.errors()
            )
        ) from None
    mistakes = declared.mistakes()
    if mistakes:
        raise DeclarationError(
            "\n".join(
                f"{name}:{line_of(lines, loc)}: {_where(loc)}: {msg}" for loc, msg in mistakes
            )
        )
    return declared


def _message(name: str, lines: dict[Loc, int], loc: Loc, msg: str, given: object, kind: str) -> str:
    # pydantic adds the union member or validator to the location (`function-after[...]`):
    # the file's reader knows keys only.
    keys = tuple(
        p
        for p in loc
        if not (
            isinstance(p, str)
            and ("[" in p or p in {"str", "int", "bool", "list[union[str,int,bool]]"})
        )
    )
    shown = f"{_where(keys)}: {msg.removeprefix('Value error, ')}"
    if kind == "missing":
        shown = f"{_where(keys)}: required, and missing"
    elif kind == "extra_forbidden":
        shown = f"{_where(keys)}: not a key of the provider file format (a typo?)"
    elif not isinstance(given, dict) and given is not None and "input" not in msg:
        shown += f" (got {given!r})"
    return f"{name}:{line_of(lines, keys)}: {shown}"


def load(path: str | Path) -> ProviderFile:
    """The provider file at `path`; DeclarationError naming the line for any mistake."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise DeclarationError(f"{path}: cannot read the provider file: {error.strerror}") from None
    return parse(text, str(path))
