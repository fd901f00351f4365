"""Which operations wait for a person's approval before they are dispatched.

Pure. The intake applies it when it accepts a transaction and records the answer on each
step (OperationSpec.approval_required), so the decider honours what was decided then, and
the chain shows it. A per-tenant policy may replace `needs_approval` (its signature is the
seam); until then RECON_APPROVAL_REQUIRED names the classes and reversibilities.
"""

from collections.abc import Collection

from events.catalog import Classified

# Side-effect classes and reversibilities that need approval. `destructive` by default:
# naming `compensating_only` or `irreversible` as well would hold every charge and email.
DEFAULT_APPROVAL_REQUIRED = frozenset({"destructive"})
KNOWN = frozenset(
    {"read", "write", "destructive", "reversible", "compensating_only", "irreversible"}
)


def conflicts_of_duty(approver: str, agent_id: str, submitted_by: str | None) -> bool:
    """Separation of duties, on principals: a person may not approve a transaction they
    requested, whether it names them as its agent or their operator key submitted it (as
    whichever agent). `submitted_by` is the submitting key's principal
    (services.intake.auth.Principal.name), None on transactions from before it was kept."""
    return approver == agent_id or submitted_by == f"operator:{approver}"


def needs_approval(info: Classified, required: Collection[str] = DEFAULT_APPROVAL_REQUIRED) -> bool:
    return info.side_effect.value in required or info.reversibility.value in required
