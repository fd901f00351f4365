"""Provider URL paths built from values an agent wrote (issue 18, item 6).

A payload value that goes into a provider's path is one path segment, never a path: a
charge id `x/../../effects?operation=payments.charge&` unescaped reads the provider's list
of every tenant's effects. Every reserved character is percent-escaped (`/`, `?`, `#`, `%`),
and the dot segments `.` and `..` are refused: escaping leaves them as they are and the
HTTP client (and any proxy between) removes them, climbing out of the resource.

Pure: no I/O.
"""

from urllib.parse import quote

# Far longer than any provider id (Stripe's are under 40 characters), short enough that a
# payload cannot make the request line the provider refuses for its size.
MAX_SEGMENT_CHARS = 256


class UnsafeSegment(ValueError):
    """The value cannot name one resource of a provider path; nothing is asked."""


def segment(value: str) -> str:
    """`value` as one escaped path segment."""
    if value in ("", ".", "..") or len(value) > MAX_SEGMENT_CHARS:
        raise UnsafeSegment(f"{value[:40]!r} is not a resource id")
    return quote(value, safe="")
