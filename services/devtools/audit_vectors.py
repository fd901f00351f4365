"""Writes the published test vectors in docs/vectors/ (`python -m services.devtools.audit_vectors`).

They are frozen: tests/unit/test_canonical_vectors.py regenerates them in memory and fails
when a file differs, so a change of the canonical form (or of the bundle format) cannot
slip in unnoticed; another language's verifier (verifier-go/) reads the same files.

docs/vectors/legacy-log.jsonl is not generated here: it is a log written by recon before
canonical forms were named (commit fc501e0), kept as it was to prove it still verifies.
"""

import json
from pathlib import Path
from typing import Any

from events.canonical import jcs, sha256_hex
from services.devtools.infra._process import REPO_ROOT

VECTORS = REPO_ROOT / "docs" / "vectors"

# Inputs as JSON text, so a number's spelling in the input (1.0, 1E30) is part of the case.
CANONICAL_CASES: list[tuple[str, str]] = [
    ("key order", '{"b": 1, "a": 2, "c": {"z": null, "y": [3, 2, 1]}}'),
    ("whitespace", '{ "a" : [ 1 , 2 ] ,\n "b" : "x" }'),
    ("literals", "[null, true, false]"),
    ("integers", "[0, -1, 1299, 9007199254740991, -9007199254740991]"),
    ("numbers as ES6 prints them", "[1.0, 4.50, 2e-3, 1e-7, 1E30, 1e21, 123456789.5, -0.0]"),
    ("string escapes", '"quote \\" backslash \\\\ newline \\n tab \\t unit \\u001f bell \\u0007"'),
    ("no escape beyond what JSON needs", '"slash / line separator \\u2028 euro \\u20ac"'),
    ("keys sorted by UTF-16 code units", '{"\\ue000": 1, "\\ud83d\\ude00": 2, "a": 3}'),
    (
        "RFC 8785 section 3.2.2",
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}',
    ),
]


def canonical_vectors() -> list[dict[str, Any]]:
    out = []
    for name, text in CANONICAL_CASES:
        canonical = jcs(json.loads(text))
        out.append(
            {
                "name": name,
                "input": text,
                "canonical": canonical.decode("utf-8"),
                "sha256": sha256_hex(canonical),
            }
        )
    return out


def rendered() -> dict[str, str]:
    """Each generated file's path under docs/vectors and its exact text."""
    return {"canonical.json": _dump({"form": "jcs", "cases": canonical_vectors()})}


def _dump(document: Any) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    VECTORS.mkdir(parents=True, exist_ok=True)
    for name, text in rendered().items():
        path: Path = VECTORS / name
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
