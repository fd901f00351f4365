"""API keys kept out of the configuration (issue 25, item 5): a key written `sha256:<hex>`
is matched by the digest of the key presented, and the key lists can come from files."""

import hashlib
from pathlib import Path

import pytest

from services.config import ConfigError, load_settings
from services.intake.auth import principal_for
from services.intake.errors import ApiError


def _hashed(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def test_a_hashed_key_authenticates_the_key_and_not_its_digest() -> None:
    keys = {_hashed("s3cret-agent-key"): "acme"}
    assert principal_for("Bearer s3cret-agent-key", keys).tenant == "acme"
    for wrong in ("s3cret-agent-kez", _hashed("s3cret-agent-key")):
        with pytest.raises(ApiError) as refused:
            principal_for(f"Bearer {wrong}", keys)
        assert refused.value.status == 401


def test_key_lists_read_from_files_with_comments_and_one_entry_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents = tmp_path / "agents"
    agents.write_text(f"# acme's agents\n{_hashed('acme-key')}=acme\nother-key=other\n")
    operators = tmp_path / "operators"
    operators.write_text(f"{_hashed('ops-secret')}=acme:alice\n")
    monkeypatch.setenv("RECON_API_KEYS_FILE", str(agents))
    monkeypatch.setenv("RECON_OPERATOR_KEYS_FILE", str(operators))
    settings = load_settings()
    assert principal_for("Bearer acme-key", settings.api_keys).tenant == "acme"
    assert principal_for("Bearer other-key", settings.api_keys).tenant == "other"
    admin = principal_for("Bearer ops-secret", settings.api_keys, settings.operator_keys)
    assert (admin.tenant, admin.operator) == ("acme", "alice")


def test_a_key_list_set_twice_or_unreadable_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECON_API_KEYS_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="RECON_API_KEYS_FILE: cannot read"):
        load_settings()
    monkeypatch.setenv("RECON_API_KEYS", "k=demo")
    with pytest.raises(ConfigError, match="set RECON_API_KEYS or RECON_API_KEYS_FILE, not both"):
        load_settings()
