"""The answers the decider decides inline: an observation of a call it made, decided in the
transaction that writes it to recon.observations as evidence (services.decider.dispatch_host),
carries the INLINE header. Read back, it is skipped, and its offset moves only with the
partition's next transaction (services.decider.runtime). Whoever reads the decider's inputs
from outside tells these records from work by this one rule (the intake's progress rule,
services.intake.group_progress)."""

# The value names the writer.
INLINE = "recon-decided"
INLINE_HEADER = (INLINE, b"decider")


def inline_answer(headers: list[tuple[str, bytes]] | tuple[tuple[str, bytes], ...] | None) -> bool:
    """Whether a record read from recon.observations was decided when it was written."""
    return any(key == INLINE for key, _ in headers or ())
