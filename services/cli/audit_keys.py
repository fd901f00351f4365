"""`audit keys`: the public keys a verifier needs (docs/receipts.md, "Keys"), as the
verify keys file holds them: those of RECON_VERIFY_KEYS_FILE, then the public part of the
signing key this environment configures (the development key in dev and test). Printing
both is how a rotation's new file is made."""

from pathlib import Path

from services.cli.verdict import print_json
from services.config import ConfigError, Settings
from services.signing_keys import _env, key_entry, read_verify_keys, signing_key


def run_keys(settings: Settings) -> int:
    entries: dict[str, dict[str, str]] = {}
    path = _env("RECON_VERIFY_KEYS_FILE")
    if path:
        for public in read_verify_keys(Path(path)).values():
            entry = key_entry(public)
            entries[entry["key_id"]] = entry
    try:
        entry = key_entry(signing_key(settings.environment).public_key())
        entries[entry["key_id"]] = entry
    except ConfigError:
        if not entries:
            raise
    print_json({"keys": list(entries.values())})
    return 0
