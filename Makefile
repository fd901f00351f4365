# Entry points for people and CI. Everything runs from the checkout through uv; Kafka and
# Postgres are started by services.devtools.infra as local processes (no Docker needed).

# uv is used from PATH when present; otherwise it is installed with pip and run as a module,
# which works whether or not pip's script directory is on PATH.
UV := $(shell command -v uv 2>/dev/null || echo python3 -m uv)
# Never re-resolve: CI and developers run exactly what uv.lock pins.
export UV_FROZEN := 1

.PHONY: setup test lint fetch run bench

.venv: pyproject.toml uv.lock
	@command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv==0.13.9
	$(UV) sync --frozen --quiet
	@touch .venv

setup: .venv

# The jar download happens here rather than inside pytest so its progress is visible.
fetch: setup
	$(UV) run python -m services.devtools.infra fetch

lint: setup
	$(UV) run ruff check .
	$(UV) run mypy .

test: fetch lint
	$(UV) run pytest -q

run: fetch
	$(UV) run python -m services.devtools.stack

bench: setup
	$(UV) run python -m services.devtools.bench
