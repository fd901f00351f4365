"""The base of recon's string enumerations: enum.StrEnum with a `value` read in C.

pydantic-core serializes an enum member by reading its `value` attribute, and Python 3.11's
is a property written in Python (enum.property, which calls Enum.value): two Python calls
per member serialized. The decider serializes the state it keeps at each input, dozens of
members each: read in C, a README transaction's state dumps 10-25 % faster (docs/
benchmark.md, "The decider's CPU by Python stack"). Here `value` is a property over
`operator.attrgetter("_value_")`, both in C, giving what Enum.value gives (every member's
`_value_`; tests/unit/test_str_enum.py), so every serialized byte and every comparison
stays as it was.
"""

import enum
import operator
from typing import TYPE_CHECKING


class StrEnum(enum.StrEnum):
    if not TYPE_CHECKING:  # typed as enum.StrEnum's, whose value mypy knows per member
        # A descriptor: the enum machinery keeps it as an attribute, never as a member.
        value = property(operator.attrgetter("_value_"))
