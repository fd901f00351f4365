"""The configuration reference (docs/configuration.md, which the README's "Configuration"
links) states the defaults services.config applies: every variable recon reads is listed,
with the default it really has."""

import re
from pathlib import Path

import pytest

from services.config import DEFAULTS, Settings, load_settings

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _table() -> dict[str, str | None]:
    """Variable -> its default as the reference's table writes it (None for "unset": read
    by no setting, e.g. the test-only crash points)."""
    rows: dict[str, str | None] = {}
    for line in REFERENCE.read_text().splitlines():
        if not line.startswith("| `RECON_"):
            continue
        # Cells are split on `|` not escaped as `\|` (the secrets row holds one).
        names_cell, default_cell = re.split(r"(?<!\\)\|", line)[1:3]
        names = re.findall(r"`(RECON_\w+)`", names_cell)
        written = default_cell.strip()
        if written == "empty":
            defaults: list[str | None] = [""] * len(names)
        elif written == "unset":
            defaults = [None] * len(names)
        else:
            defaults = list(re.findall(r"`([^`]*)`", written))
        assert len(defaults) == len(names), f"row {line!r}: one default per variable"
        rows.update(zip(names, defaults, strict=True))
    return rows


def test_every_default_is_in_the_reference_as_written_in_config() -> None:
    table = _table()
    assert {name: table.get(name) for name in DEFAULTS} == DEFAULTS


def test_the_reference_lists_no_variable_with_a_default_config_does_not_apply() -> None:
    stated = {name for name, default in _table().items() if default is not None}
    assert stated - set(DEFAULTS) == set()


def test_the_dataclass_defaults_are_the_environment_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With nothing set, the settings a process loads equal the dataclasses' own defaults
    # (what tests and tools constructing Settings by hand get).
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    loaded = load_settings()
    built = Settings(
        kafka_bootstrap=loaded.kafka_bootstrap,
        database_url=loaded.database_url,
        topics=loaded.topics,
        environment=loaded.environment,
        api_keys=loaded.api_keys,
        providers=loaded.providers,
        webhook_schemes=loaded.webhook_schemes,
    )
    assert loaded == built


def test_an_admin_key_is_apart_from_every_tenants_keys() -> None:
    from services.config import ConfigError, admin_keys

    assert admin_keys("adm-1=ada, adm-2=bob", {"demo-key"}) == {"adm-1": "ada", "adm-2": "bob"}
    assert admin_keys("", {"demo-key"}) == {}
    with pytest.raises(ConfigError, match="RECON_ADMIN_KEYS"):
        admin_keys("ops-key=ada", {"demo-key", "ops-key"})


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", "1e300", "0", "-5", "soon"])
def test_a_time_in_seconds_that_is_no_positive_finite_duration_is_refused_at_start(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """float() reads 'nan' and 'inf': a grace of nan loaded and failed in the first drift
    scan, one of 1e300 overflowed there; both are refused at start, naming the variable."""
    from services.config import ConfigError

    monkeypatch.setenv("RECON_DRIFT_GRACE_S", raw)
    with pytest.raises(ConfigError, match="RECON_DRIFT_GRACE_S"):
        load_settings()


def test_a_long_time_in_seconds_is_still_a_duration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_DRIFT_GRACE_S", "1e9")
    assert load_settings().reconciler.drift_grace_s == 1e9
