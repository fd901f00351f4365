"""The auditor's three-valued verdict (docs/receipts.md, "Verdicts"), one vocabulary for
`audit verify`, `audit verify-bundle`, the receipt route and the Go verifier.

VALID: every link and signature checked holds. INVALID: one does not: evidence of tampering
or corruption. UNVERIFIABLE: something could not be checked (a key not known, a canonical
form not supported, nothing signed yet), which proves nothing either way.
"""

from events.str_enum import StrEnum


class Verdict(StrEnum):
    VALID = "VALID"
    INVALID = "INVALID"
    UNVERIFIABLE = "UNVERIFIABLE"
