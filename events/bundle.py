"""An evidence bundle: one transaction's events, the signed checkpoint covering them and the
provider evidence they were decided from, in one JSON file an auditor checks without recon
(docs/receipts.md, "Evidence bundles"). This module builds none of it (services.cli.
audit_bundle reads the log); it gives the verdict, and is the reference the vectors in
docs/vectors/bundles/ and the Go verifier (verifier-go/) are held to.

The verdict, first problem first:
- INVALID: an event out of place (tenant, tx_id, seq), a prev_hash that is not the previous
  event's hash, a hash that is not its content's, a checkpoint signature that does not hold,
  a checkpoint that does not sign this transaction, or a signed head the events do not end
  at or pass through (an event removed from the end, or a rewritten chain).
- UNVERIFIABLE (only when nothing is INVALID): a bundle format, canonical form or key this
  verifier does not know, no checkpoint, or events after the signed head (not signed yet).
- VALID otherwise.

The evidence (commands and observations) is carried, not judged: the events that recorded
it are what the chain and the signature cover.
"""

from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from events.canonical import SUPPORTED, UnsupportedCanon, canonical_bytes, form_name, sha256_hex
from events.checkpoint import CheckpointInvalid, CheckpointUnverifiable, verify_checkpoint
from events.envelope import GENESIS_HASH
from events.verdict import Verdict

FORMAT = "recon.bundle/1"


@dataclass(frozen=True)
class BundleVerdict:
    verdict: Verdict
    problem: str | None  # the first INVALID problem, else the first UNVERIFIABLE one
    canonical_forms: tuple[str, ...] = ()
    signed_seq: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "problem": self.problem,
            "canonical_forms": list(self.canonical_forms),
            "signed_seq": self.signed_seq,
        }


class _Findings:
    def __init__(self) -> None:
        self.invalid: str | None = None
        self.unverifiable: str | None = None

    def bad(self, problem: str) -> None:
        self.invalid = self.invalid or problem

    def unknown(self, problem: str) -> None:
        self.unverifiable = self.unverifiable or problem


def verify_bundle(bundle: Any, keys: dict[str, Ed25519PublicKey]) -> BundleVerdict:
    if not isinstance(bundle, dict) or bundle.get("format") != FORMAT:
        found = bundle.get("format") if isinstance(bundle, dict) else type(bundle).__name__
        return BundleVerdict(Verdict.UNVERIFIABLE, f"bundle format {found!r} is not {FORMAT!r}")
    tenant, tx_id, events = bundle.get("tenant"), bundle.get("tx_id"), bundle.get("events")
    if not isinstance(events, list) or not events:
        return BundleVerdict(Verdict.INVALID, "the bundle holds no events")
    findings = _Findings()
    forms: set[str] = set()
    prev = GENESIS_HASH
    hashes: dict[int, str] = {}
    for index, event in enumerate(events):
        seq = index + 1
        if not isinstance(event, dict):
            findings.bad(f"event {seq}: not a JSON object")
            break
        where = f"seq {event.get('seq')}"
        if event.get("tenant") != tenant or event.get("tx_id") != tx_id:
            findings.bad(f"{where}: an event of another transaction")
        if event.get("seq") != seq:
            findings.bad(f"{where} where {seq} was expected (an event removed or moved)")
        if event.get("prev_hash") != prev:
            findings.bad(f"{where}: prev_hash is not the previous event's hash")
        canon = event.get("canon")
        forms.add(form_name(canon) if canon is None or isinstance(canon, str) else repr(canon))
        content = {k: v for k, v in event.items() if k != "hash"}
        try:
            if not (canon is None or isinstance(canon, str)):
                raise UnsupportedCanon(f"canonical form {canon!r} is not supported")
            material = str(event.get("prev_hash", "")).encode() + canonical_bytes(canon, content)
            if sha256_hex(material) != event.get("hash"):
                findings.bad(f"{where}: hash does not match its content")
        except UnsupportedCanon as error:
            findings.unknown(f"{where}: {error}")
        except ValueError as error:  # content no canonical form can hold (NaN, ...)
            findings.bad(f"{where}: content cannot be canonicalized ({error})")
        prev = str(event.get("hash"))
        hashes[seq] = prev
    signed_seq = _check_checkpoint(bundle.get("checkpoint"), keys, tenant, tx_id, hashes, findings)
    shown = tuple(sorted(forms))
    if findings.invalid:
        return BundleVerdict(Verdict.INVALID, findings.invalid, shown, signed_seq)
    if findings.unverifiable:
        return BundleVerdict(Verdict.UNVERIFIABLE, findings.unverifiable, shown, signed_seq)
    assert all(form in SUPPORTED for form in forms)
    return BundleVerdict(Verdict.VALID, None, shown, signed_seq)


def _check_checkpoint(
    checkpoint: Any,
    keys: dict[str, Ed25519PublicKey],
    tenant: Any,
    tx_id: Any,
    hashes: dict[int, str],
    findings: _Findings,
) -> int | None:
    """The seq of the signed head when the signature holds, else None."""
    if checkpoint is None:
        findings.unknown("no signed checkpoint covers this transaction")
        return None
    if not isinstance(checkpoint, dict):
        findings.bad("the checkpoint is not a JSON object")
        return None
    try:
        verify_checkpoint(checkpoint, keys)
    except CheckpointUnverifiable as error:
        findings.unknown(f"checkpoint: {error}")
        return None
    except CheckpointInvalid as error:
        findings.bad(f"checkpoint: {error}")
        return None
    heads = [
        h
        for h in checkpoint.get("heads", [])
        if isinstance(h, dict) and h.get("tenant") == tenant and h.get("tx_id") == tx_id
    ]
    if len(heads) != 1:
        findings.bad("the checkpoint does not sign this transaction's head")
        return None
    head = heads[0]
    seq, last = head.get("seq"), max(hashes)
    if not isinstance(seq, int) or seq not in hashes:
        findings.bad(
            f"the checkpoint signs seq {seq}, but the events end at seq {last} (events removed)"
        )
        return None
    if hashes[seq] != head.get("hash"):
        findings.bad(f"seq {seq}: hash is not the one the checkpoint signed (a rewritten chain)")
        return None
    if seq < last:
        findings.unknown(f"events after seq {seq} are not covered by a signature yet")
    return seq
