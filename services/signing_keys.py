"""The decider's signing key and the auditors' verify keys (docs/receipts.md, "Keys").

Outside `dev` and `test` the decider refuses to start without RECON_SIGNING_KEY or
RECON_SIGNING_KEY_FILE: a public key would let anyone sign a rewritten chain. In `dev` and
`test` an unset key means the development key, derived from a public seed so that every
process (the decider that signs, the CLI and intake that verify) knows it with no
configuration; its checkpoints prove nothing, as the sandbox's webhook secret.
"""

import base64
import hashlib
import json
import os
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from events.checkpoint import key_id, public_key_from_base64, raw_public_key
from services.config import DEFAULTS, DEVELOPMENT_ENVIRONMENTS, ConfigError

DEVELOPMENT_SEED = hashlib.sha256(b"recon development signing key (public, dev and test only)")


def _env(name: str) -> str:
    return os.environ.get(name, DEFAULTS[name])


def development_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(DEVELOPMENT_SEED.digest())


def _parse_private(text: str, source: str) -> Ed25519PrivateKey:
    text = text.strip()
    try:
        if text.startswith("-----BEGIN"):
            key = load_pem_private_key(text.encode(), password=None)
            if not isinstance(key, Ed25519PrivateKey):
                raise ValueError("not an Ed25519 key")
            return key
        seed = base64.b64decode(text, validate=True)
        if len(seed) != 32:
            raise ValueError(f"the seed is 32 bytes, got {len(seed)}")
        return Ed25519PrivateKey.from_private_bytes(seed)
    except ValueError as error:
        raise ConfigError(
            f"{source}: expected an Ed25519 private key, as a base64 32-byte seed or a PKCS#8 "
            f"PEM ({error})"
        ) from error


def signing_key(environment: str) -> Ed25519PrivateKey:
    """The key the decider signs checkpoints with; ConfigError when none is configured
    outside development."""
    inline, path = _env("RECON_SIGNING_KEY"), _env("RECON_SIGNING_KEY_FILE")
    if inline and path:
        raise ConfigError("RECON_SIGNING_KEY and RECON_SIGNING_KEY_FILE: set one, not both")
    if inline:
        return _parse_private(inline, "RECON_SIGNING_KEY")
    if path:
        try:
            text = Path(path).read_text()
        except OSError as error:
            raise ConfigError(f"RECON_SIGNING_KEY_FILE: cannot read {path!r}: {error}") from error
        return _parse_private(text, f"RECON_SIGNING_KEY_FILE {path}")
    if environment in DEVELOPMENT_ENVIRONMENTS:
        return development_key()
    raise ConfigError(
        "RECON_SIGNING_KEY or RECON_SIGNING_KEY_FILE: the decider signs checkpoints and needs "
        f"a key of its own when RECON_ENVIRONMENT is {environment!r} (docs/receipts.md, Keys)"
    )


def key_entry(public: Ed25519PublicKey) -> dict[str, str]:
    return {
        "key_id": key_id(public),
        "algorithm": "Ed25519",
        "public_key": base64.b64encode(raw_public_key(public)).decode("ascii"),
    }


def verify_keys(environment: str) -> dict[str, Ed25519PublicKey]:
    """key_id -> public key: RECON_VERIFY_KEYS_FILE's, and in dev and test the development
    key's. A listed key_id that is not its key's is refused: ids are derived, never chosen."""
    keys: dict[str, Ed25519PublicKey] = {}
    if environment in DEVELOPMENT_ENVIRONMENTS:
        dev = development_key().public_key()
        keys[key_id(dev)] = dev
    path = _env("RECON_VERIFY_KEYS_FILE")
    if path:
        keys.update(read_verify_keys(Path(path)))
    return keys


def read_verify_keys(path: Path) -> dict[str, Ed25519PublicKey]:
    source = f"verify keys file {path}"
    try:
        document = json.loads(path.read_text())
        entries = document["keys"]
        keys = {}
        for entry in entries:
            public = public_key_from_base64(entry["public_key"])
            if entry.get("key_id", key_id(public)) != key_id(public):
                raise ValueError(f"key_id {entry['key_id']!r} is not its key's ({key_id(public)})")
            keys[key_id(public)] = public
        return keys
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            f'{source}: expected {{"keys": [{{"key_id": ..., "public_key": <base64>}}]}} as '
            f"`audit keys` prints it ({error!r})"
        ) from error
