"""JSON pointers (RFC 6901, `/a/b/0`) into payloads and answers: where a declared file
says a value is, or where it goes. Pure: no I/O."""

from typing import Any

# A value a pointer did not find: distinct from a JSON null that is there.
MISSING: Any = object()


class PointerError(ValueError):
    """The pointer is not one (it must start with `/`)."""


def parts(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise PointerError(f"{pointer!r} is not a JSON pointer: it starts with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


def get(document: Any, pointer: str) -> Any:
    """The value at `pointer` in `document`, or MISSING."""
    here = document
    for part in parts(pointer):
        if isinstance(here, dict) and part in here:
            here = here[part]
        elif isinstance(here, list) and part.isascii() and part.isdigit() and int(part) < len(here):
            here = here[int(part)]
        else:
            return MISSING
    return here


def put(document: dict[str, Any], pointer: str, value: Any) -> None:
    """Set `pointer` in `document`, making the objects on the way."""
    names = parts(pointer)
    here = document
    for part in names[:-1]:
        nested = here.get(part)
        if not isinstance(nested, dict):
            nested = here[part] = {}
        here = nested
    here[names[-1]] = value
