"""The auditor's three-valued verdict and how a command reports it (`audit verify`,
`audit verify-bundle`): a verdict a script can branch on without parsing the words.

VALID: every link and signature checked and holds. INVALID: something checked and does not
hold (a broken link, a bad signature): evidence of tampering or corruption. UNVERIFIABLE:
something could not be checked (a key not known, a canonical form not supported), which
proves nothing either way.
"""

import json
import sys
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    VALID = "VALID"
    INVALID = "INVALID"
    UNVERIFIABLE = "UNVERIFIABLE"


# 2 stays "could not run" (services.cli.audit), as for every audit command.
EXIT_CODES = {Verdict.VALID: 0, Verdict.INVALID: 1, Verdict.UNVERIFIABLE: 3}


def exit_code(verdict: Verdict) -> int:
    return EXIT_CODES[verdict]


def print_json(document: dict[str, Any]) -> None:
    json.dump(document, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
