"""A tx_id an agent can derive again after a crash: reuse the same tx_id on every retry.

An agent that mints a fresh tx_id when it retries (after a timeout, a crash, a re-plan)
turns one intent into two transactions, and recon's op keys, derived from the tx_id, can no
longer see that they are one. Derive the tx_id from what survives the retry instead: the
agent run's id and the id of the tool call that asked for the effect (an LLM framework's
`tool_call_id`, replayed when the run is resumed). Frozen by a test vector: a changed
derivation would make a resumed run's retry look like a new intent.
"""

import hashlib
import json
import re

_PREFIX = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
VERSION = 1


def stable_tx_id(run_id: str, tool_call_id: str, *, prefix: str = "tx") -> str:
    """`<prefix>-<40 hex>`, the same for the same (run, tool call) in every process."""
    if not run_id or not tool_call_id:
        raise ValueError("run_id and tool_call_id must both be non-empty")
    if not _PREFIX.match(prefix):
        raise ValueError(f"prefix {prefix!r} must match [A-Za-z0-9._:-]{{1,64}}")
    material = json.dumps(
        ["recon.tx_id", VERSION, run_id, tool_call_id], separators=(",", ":"), ensure_ascii=False
    )
    return f"{prefix}-{hashlib.sha256(material.encode()).hexdigest()[:40]}"
