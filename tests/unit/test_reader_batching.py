"""services.reader_batching: readers wait only after a large fetch, never when idle, and the
wait is a bounded, validated setting."""

import pytest

from services.config import ConfigError, load_settings
from services.reader_batching import LARGE_FETCH, wait_before_next_fetch


def test_idle_or_a_trickle_fetches_again_at_once() -> None:
    for fetched in (0, 1, LARGE_FETCH - 1):
        assert wait_before_next_fetch(fetched, 0.02) == 0.0


def test_after_a_large_fetch_the_reader_lets_records_gather() -> None:
    assert wait_before_next_fetch(LARGE_FETCH, 0.02) == 0.02
    assert wait_before_next_fetch(500, 0.0) == 0.0  # 0 turns it off


def test_the_wait_is_read_in_milliseconds_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECON_READER_BATCH_WAIT_MS", "35")
    assert load_settings().reader_batch_wait_s == pytest.approx(0.035)
    for bad in ("-1", "51", "soon"):
        monkeypatch.setenv("RECON_READER_BATCH_WAIT_MS", bad)
        with pytest.raises(ConfigError, match="RECON_READER_BATCH_WAIT_MS"):
            load_settings()


def test_the_sagas_wait_is_its_own_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().saga_batch_wait_s == pytest.approx(0.25)
    monkeypatch.setenv("RECON_SAGA_BATCH_WAIT_MS", "0")
    assert load_settings().saga_batch_wait_s == 0.0
    for bad in ("-1", "1001", "soon"):
        monkeypatch.setenv("RECON_SAGA_BATCH_WAIT_MS", bad)
        with pytest.raises(ConfigError, match="RECON_SAGA_BATCH_WAIT_MS"):
            load_settings()
