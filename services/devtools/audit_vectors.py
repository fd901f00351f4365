"""Writes the published test vectors in docs/vectors/ (`python -m services.devtools.audit_vectors`).

They are frozen: tests/unit/test_canonical_vectors.py regenerates them in memory and fails
when a file differs, so a change of the canonical form (or of the bundle format) cannot
slip in unnoticed; another language's verifier (verifier-go/) reads the same files.

docs/vectors/legacy-log.jsonl is not generated here: it is a log written by recon before
canonical forms were named (commit fc501e0), kept as it was to prove it still verifies.
"""

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events.bundle import FORMAT, verify_bundle
from events.canonical import jcs, sha256_hex
from events.checkpoint import Head, key_id, record_digest, sign_checkpoint
from events.envelope import GENESIS_HASH, chain_hash
from services.devtools.infra._process import REPO_ROOT
from services.devtools.synthetic_log import transaction_records
from services.signing_keys import key_entry

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


# The vectors' keys, from public seeds: Ed25519 signatures are deterministic, so the same
# seeds give the same files. Only VECTOR_KEY is in keys.json.
VECTOR_KEY = Ed25519PrivateKey.from_private_bytes(
    hashlib.sha256(b"recon conformance vectors: the known key (public)").digest()
)
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(
    hashlib.sha256(b"recon conformance vectors: a key no verifier knows (public)").digest()
)
SIGNED_AT = "2026-12-03T00:00:00+00:00"


def _events() -> list[dict[str, Any]]:
    """A committed transaction as the real decider writes it (services.devtools.
    synthetic_log): reserve, charge confirmed also by a webhook, a receipt on commit."""
    start = datetime(2026, 12, 3, tzinfo=UTC)
    return [json.loads(r.value) for r in transaction_records(0, start, 1) if r.role == "events"]


def _evidence() -> dict[str, list[Any]]:
    start = datetime(2026, 12, 3, tzinfo=UTC)
    records = transaction_records(0, start, 1)
    return {
        "commands": [json.loads(r.value) for r in records if r.role == "commands"],
        "observations": [json.loads(r.value) for r in records if r.role == "observations"],
    }


def _checkpoint(
    events: list[dict[str, Any]], key: Ed25519PrivateKey, prev_checkpoint: str | None = None
) -> dict[str, Any]:
    last = events[-1]
    head = Head(last["tenant"], last["tx_id"], last["seq"], last["hash"])
    return sign_checkpoint(key, SIGNED_AT, [head], prev_checkpoint)


def _bundle(events: list[dict[str, Any]], checkpoint: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "tenant": events[0]["tenant"],
        "tx_id": events[0]["tx_id"],
        "events": events,
        "checkpoint": checkpoint,
        "evidence": _evidence(),
    }


def _rechained(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out, prev = [], GENESIS_HASH
    for event in events:
        body = {k: v for k, v in event.items() if k != "hash"} | {"prev_hash": prev}
        prev = chain_hash(prev, body)
        out.append({**body, "hash": prev})
    return out


def bundle_vectors() -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (what it shows, bundle). Their verdicts are events.bundle's, written to
    expected.json; tests hold both verifiers to them."""
    events = _events()
    good = _checkpoint(events, VECTOR_KEY)
    tampered = json.loads(json.dumps(events))
    tampered[3]["data"]["payload" if "payload" in tampered[3]["data"] else "action"] = "forged"
    rewritten = json.loads(json.dumps(events))
    rewritten[3]["data"]["action"] = "forged"
    wrong = _checkpoint(events, OTHER_KEY)
    wrong["key_id"] = good["key_id"]
    legacy = [json.loads(line) for line in (VECTORS / "legacy-log.jsonl").read_text().splitlines()]
    unknown_form = json.loads(json.dumps(events))
    unknown_form[0]["canon"] = "jcs-2"
    later = _checkpoint(events[:-1], VECTOR_KEY)
    # The checked-in `valid` bundle with its checkpoint as the decider writes it now:
    # naming the partition's record before it (here the checkpoint of the head before
    # the last), a member the signature covers.
    valid = json.loads((VECTORS / "bundles" / "valid.json").read_text())
    linked_events = valid["events"]
    previous = _checkpoint(linked_events[:-1], VECTOR_KEY)
    linked = {
        **valid,
        "checkpoint": _checkpoint(linked_events, VECTOR_KEY, record_digest(orjson.dumps(previous))),
    }
    relinked = {
        **valid,
        "checkpoint": {**linked["checkpoint"], "prev_checkpoint": record_digest(b"another")},
    }
    return {
        "valid": (
            "a committed transaction, its last head signed by the known key",
            _bundle(events, good),
        ),
        "tampered-payload": ("one field of event 4 changed", _bundle(tampered, good)),
        "removed-event": ("event 3 removed", _bundle(events[:2] + events[3:], good)),
        "removed-last-event": ("the signed last event removed", _bundle(events[:-1], good)),
        "reordered": (
            "events 2 and 3 swapped",
            _bundle([events[0], events[2], events[1], *events[3:]], good),
        ),
        "rewritten-chain": (
            "event 4 changed and every hash recomputed: the chain holds, the signed head does not",
            _bundle(_rechained(rewritten), good),
        ),
        "wrong-key": ("signed by another key under the known key's id", _bundle(events, wrong)),
        "unknown-key": (
            "signed by a key the verifier does not know",
            _bundle(events, _checkpoint(events, OTHER_KEY)),
        ),
        "unknown-canonical-form": (
            "event 1 names a form no verifier supports",
            _bundle(unknown_form, good),
        ),
        "unsigned-tail": ("the last event is after the signed head", _bundle(events, later)),
        "linked-checkpoint": (
            "`valid` with its checkpoint naming the one before it (prev_checkpoint), signed",
            linked,
        ),
        "tampered-link": (
            "`linked-checkpoint` with its prev_checkpoint changed after it was signed",
            relinked,
        ),
        "legacy-unsigned": (
            "a log written before forms and checkpoints existed",
            _bundle(legacy, None),
        ),
    }


def keys_document() -> dict[str, Any]:
    return {"keys": [key_entry(VECTOR_KEY.public_key())]}


def rendered() -> dict[str, str]:
    """Each generated file's path under docs/vectors and its exact text."""
    keys = {key_id(VECTOR_KEY.public_key()): VECTOR_KEY.public_key()}
    files = {"canonical.json": _dump({"form": "jcs", "cases": canonical_vectors()})}
    files["bundles/keys.json"] = _dump(keys_document())
    expected = {}
    for name, (shows, bundle) in bundle_vectors().items():
        files[f"bundles/{name}.json"] = _dump(bundle)
        verdict = verify_bundle(bundle, keys)
        expected[name] = {
            "shows": shows,
            "verdict": verdict.verdict.value,
            "problem": verdict.problem,
        }
    files["bundles/expected.json"] = _dump(expected)
    return files


def _dump(document: Any) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    VECTORS.mkdir(parents=True, exist_ok=True)
    for name, text in rendered().items():
        path: Path = VECTORS / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
