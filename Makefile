# Entry points for people and CI. Everything runs from the checkout through uv; Kafka and
# Postgres are started by services.infra as local processes (no Docker needed).

# uv is used from PATH when present; otherwise it is installed with pip and run as a module,
# which works whether or not pip's script directory is on PATH.
UV := $(shell command -v uv 2>/dev/null || echo python3 -m uv)
# Never re-resolve: CI and developers run exactly what uv.lock pins.
export UV_FROZEN := 1

.PHONY: setup test lint fetch run bench chaos

.venv: pyproject.toml uv.lock
	@command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv==0.13.9
	$(UV) sync --frozen --quiet
	@touch .venv

setup: .venv

# The jar download happens here rather than inside pytest so its progress is visible.
fetch: setup
	$(UV) run python -m services.infra fetch

lint: setup
	$(UV) run ruff check .
	$(UV) run mypy .

test: fetch lint
	$(UV) run pytest -q

run: fetch
	$(UV) run python -m services.stack

bench: setup
	$(UV) run python -m services.bench

# A seeded chaos run on its own Kafka/Postgres in .cache/chaos, then the verdict table; e.g.
# make chaos CHAOS_ARGS="--transactions 2000 --faults 40 --seed 123". make test runs a
# smaller one (tests/fault/test_chaos.py).
chaos: fetch
	$(UV) run python -m services.chaos $(CHAOS_ARGS)
