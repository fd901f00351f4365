"""The conformance vectors of evidence bundles (docs/vectors/bundles/, docs/receipts.md):
recon's own verifier (events.bundle) reaches each vector's published verdict, the vectors
the issue names are there, and what they show is what they hold."""

import json

from events.bundle import verify_bundle
from services.devtools.audit_vectors import VECTORS
from services.signing_keys import read_verify_keys

BUNDLES = VECTORS / "bundles"
REQUIRED = {
    "valid": "VALID",
    "tampered-payload": "INVALID",
    "removed-event": "INVALID",
    "reordered": "INVALID",
    "wrong-key": "INVALID",
    "unknown-key": "UNVERIFIABLE",
}


def test_every_vector_gets_its_published_verdict() -> None:
    keys = read_verify_keys(BUNDLES / "keys.json")
    expected = json.loads((BUNDLES / "expected.json").read_text())
    assert {name: expected[name]["verdict"] for name in REQUIRED} == REQUIRED
    for name, want in expected.items():
        bundle = json.loads((BUNDLES / f"{name}.json").read_text())
        got = verify_bundle(bundle, keys)
        assert (got.verdict.value, got.problem) == (want["verdict"], want["problem"]), name


def test_without_the_key_even_the_valid_bundle_is_unverifiable() -> None:
    bundle = json.loads((BUNDLES / "valid.json").read_text())
    assert verify_bundle(bundle, {}).verdict.value == "UNVERIFIABLE"


def test_any_field_of_any_event_changed_is_invalid() -> None:
    keys = read_verify_keys(BUNDLES / "keys.json")
    bundle = json.loads((BUNDLES / "valid.json").read_text())
    assert verify_bundle(bundle, keys).verdict.value == "VALID"
    for index, event in enumerate(bundle["events"]):
        for field in event:
            if field == "canon":
                continue  # another form: unverifiable, tested apart
            changed = json.loads(json.dumps(bundle))
            value = changed["events"][index][field]
            changed["events"][index][field] = (
                value + 1
                if isinstance(value, int)
                else {"x": 1}
                if isinstance(value, dict)
                else "x"
            )
            assert verify_bundle(changed, keys).verdict.value == "INVALID", (index, field)
