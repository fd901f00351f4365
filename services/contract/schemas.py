"""The published schemas, generated from the code and checked in under docs/:
docs/openapi.json (the intake API, FastAPI's document as the intake serves it at
/openapi.json) and docs/asyncapi.json (the Kafka topics, services.contract.asyncapi).

    python -m services.contract.schemas --write   # regenerate after changing the API
    python -m services.contract.schemas --check   # exit 1 if a file differs from the code

tests/unit/test_published_schemas.py fails while a checked-in file differs.
"""

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.config import load_settings
from services.contract.asyncapi import asyncapi_document
from services.intake.app import create_app

DOCS = Path(__file__).resolve().parents[2] / "docs"


def openapi_document() -> dict[str, Any]:
    # Building the app connects to nothing (that happens at start-up), and no route's
    # declaration depends on the settings but the catalog and the webhook routes
    # (services.intake.openapi_catalog): this is the default deployment's, the sandbox alone.
    document: dict[str, Any] = create_app(load_settings()).openapi()
    return document


GENERATED: dict[str, Callable[[], dict[str, Any]]] = {
    "openapi.json": openapi_document,
    "asyncapi.json": asyncapi_document,
}


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def stale(docs: Path = DOCS) -> list[str]:
    """The checked-in files that differ from what the code generates."""
    return [
        name
        for name, generate in GENERATED.items()
        if not (docs / name).exists() or (docs / name).read_text() != render(generate())
    ]


def write(docs: Path = DOCS) -> None:
    docs.mkdir(exist_ok=True)
    for name, generate in GENERATED.items():
        (docs / name).write_text(render(generate()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.contract.schemas")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate docs/*.json")
    mode.add_argument("--check", action="store_true", help="exit 1 if docs/ is stale")
    args = parser.parse_args(argv)
    if args.write:
        write()
        print(f"wrote {', '.join(str(DOCS / name) for name in GENERATED)}")
        return 0
    outdated = stale()
    if outdated:
        print(
            f"stale: {', '.join(outdated)}; run `uv run python -m services.contract.schemas "
            "--write` and commit docs/",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
