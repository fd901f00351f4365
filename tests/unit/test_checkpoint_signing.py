"""Signed checkpoints (events.checkpoint, docs/receipts.md): a signature holds only under
its own key and over the heads it signed; keys come from the environment, required outside
development; the decider signs a transaction's end at once and other heads on an interval."""

import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)

from events.canonical import jcs
from events.checkpoint import (
    CheckpointInvalid,
    CheckpointUnverifiable,
    Head,
    key_id,
    sign_checkpoint,
    verify_checkpoint,
)
from services.config import ConfigError
from services.decider.checkpoints import UnsignedHeads
from services.signing_keys import development_key, key_entry, signing_key, verify_keys

HEAD = Head("demo", "order-42", 9, "ab" * 32)


def _keys(*private: Ed25519PrivateKey) -> dict[str, Ed25519PublicKey]:
    return {key_id(k.public_key()): k.public_key() for k in private}


def test_a_checkpoint_verifies_under_its_key_and_its_bytes_are_jcs() -> None:
    key = Ed25519PrivateKey.generate()
    checkpoint = sign_checkpoint(key, "2026-01-01T00:00:00+00:00", [HEAD])
    verify_checkpoint(checkpoint, _keys(key))
    body = {k: v for k, v in checkpoint.items() if k != "signature"}
    key.public_key().verify(base64.b64decode(checkpoint["signature"]), jcs(body))


def test_an_altered_head_or_another_key_is_invalid_and_an_unknown_key_unverifiable() -> None:
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    checkpoint = sign_checkpoint(key, "2026-01-01T00:00:00+00:00", [HEAD])
    altered = {**checkpoint, "heads": [{**checkpoint["heads"][0], "seq": 8}]}
    with pytest.raises(CheckpointInvalid):
        verify_checkpoint(altered, _keys(key))
    # Another key's signature under this key's id.
    forged = sign_checkpoint(other, "2026-01-01T00:00:00+00:00", [HEAD])
    forged["key_id"] = checkpoint["key_id"]
    with pytest.raises(CheckpointInvalid):
        verify_checkpoint(forged, _keys(key))
    with pytest.raises(CheckpointUnverifiable):
        verify_checkpoint(checkpoint, _keys(other))


def test_a_signing_key_is_required_outside_development(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECON_SIGNING_KEY", raising=False)
    monkeypatch.delenv("RECON_SIGNING_KEY_FILE", raising=False)
    with pytest.raises(ConfigError, match="RECON_SIGNING_KEY"):
        signing_key("production")
    dev = signing_key("dev").public_key()
    assert key_id(dev) == key_id(development_key().public_key())
    assert key_id(dev) in verify_keys("test") and verify_keys("production") == {}


def test_keys_from_the_environment_a_pem_file_and_a_verify_keys_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    (tmp_path / "signing.pem").write_bytes(pem)
    monkeypatch.setenv("RECON_SIGNING_KEY_FILE", str(tmp_path / "signing.pem"))
    assert key_id(signing_key("production").public_key()) == key_id(key.public_key())
    monkeypatch.setenv("RECON_SIGNING_KEY", "bm90IGEga2V5")
    with pytest.raises(ConfigError, match="set one, not both"):
        signing_key("production")
    monkeypatch.delenv("RECON_SIGNING_KEY_FILE")
    with pytest.raises(ConfigError, match="32-byte seed"):
        signing_key("production")

    entry = key_entry(key.public_key())
    (tmp_path / "keys.json").write_text(json.dumps({"keys": [entry]}))
    monkeypatch.setenv("RECON_VERIFY_KEYS_FILE", str(tmp_path / "keys.json"))
    assert list(verify_keys("production")) == [entry["key_id"]]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": [{**entry, "key_id": "0" * 16}]}))
    with pytest.raises(ConfigError, match="is not its key's"):
        verify_keys("production")


def test_heads_are_kept_until_the_interval_then_due() -> None:
    now = [100.0]
    unsigned = UnsignedHeads(1.0, clock=lambda: now[0])
    assert not unsigned.overdue()
    unsigned.keep({("demo", "a"): HEAD})
    now[0] += 0.5
    unsigned.keep({("demo", "b"): HEAD})
    assert not unsigned.overdue()  # the oldest head's age counts
    now[0] += 0.5
    assert unsigned.overdue()
    newer = Head("demo", "a", 10, "cd" * 32)
    assert sorted(h.seq for h in unsigned.pending({("demo", "a"): newer})) == [9, 10]
    unsigned.signed()
    assert not unsigned.overdue() and unsigned.pending({}) == []
