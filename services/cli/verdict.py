"""How an audit command reports its verdict (events.verdict): an exit code a script can
branch on without parsing the words, and --json output."""

import json
import sys
from typing import Any

from events.verdict import Verdict

# 2 stays "could not run" (services.cli.audit), as for every audit command.
EXIT_CODES = {Verdict.VALID: 0, Verdict.INVALID: 1, Verdict.UNVERIFIABLE: 3}


def exit_code(verdict: Verdict) -> int:
    return EXIT_CODES[verdict]


def print_json(document: dict[str, Any]) -> None:
    json.dump(document, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
