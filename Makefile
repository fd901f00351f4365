# Entry points for people and CI. Everything runs from the checkout through uv; Kafka and
# Postgres are started by services.devtools.infra as local processes (no Docker needed).

# uv is used from PATH when present; otherwise it is installed with pip and run as a module,
# which works whether or not pip's script directory is on PATH.
UV := $(shell command -v uv 2>/dev/null || echo python3 -m uv)
# Never re-resolve: CI and developers run exactly what uv.lock pins.
export UV_FROZEN := 1

.PHONY: setup test lint fetch run bench audit-bench properties simulate chaos image-test compose-test compose-images

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

# Hypothesis runs its "ci" profile (tests/conftest.py): the same examples every run, so a
# red run reproduces and a green one is not luck. Two pytest workers, each with its own
# Kafka and Postgres: most of an integration test is waiting on other processes (a group
# session expiring, a broker restarting), so two run in about the time of one.
TEST_WORKERS ?= 2
test: fetch lint
	HYPOTHESIS_PROFILE=ci $(UV) run pytest -q -n $(TEST_WORKERS) --dist worksteal

# The unit properties on fresh random seeds with 20x the examples: the search for what the
# fixed examples of `make test` do not cover. A failure prints its seed and a reproduce blob.
properties: setup
	HYPOTHESIS_PROFILE=deep $(UV) run pytest -q -p no:cacheprovider --hypothesis-show-statistics tests/unit

# `make run BROKERS=3`: a three-node Kafka cluster instead of one broker (README "Kafka cluster").
BROKERS ?= 1
# `make run WEBHOOKS_TO=http://127.0.0.1:8097/v1/webhooks/sandbox`: the sandbox's webhooks go to
# that URL (a sink) instead of recon's intake, to benchmark recon without them (docs/benchmark.md).
WEBHOOKS_TO ?=
# `make run WEBHOOK_DELAY_MS=2000`: each webhook goes out 2 s after its effect, as a real
# provider's delivery queue sends it (docs/benchmark.md "Webhooks that come late").
WEBHOOK_DELAY_MS ?= 0

run: fetch
	$(UV) run python -m services.devtools.stack --brokers $(BROKERS) $(if $(WEBHOOKS_TO),--webhooks-to $(WEBHOOKS_TO)) --webhook-delay-ms $(WEBHOOK_DELAY_MS)

bench: setup
	$(UV) run python -m services.devtools.bench

audit-bench: setup
	$(UV) run python -m services.devtools.audit_bench

# Long simulator runs beyond the 8,000 seeds of `make test`: SEEDS schedules from seed FIRST.
SEEDS ?= 200000
FIRST ?= 8000
simulate: setup
	$(UV) run python -m tests.simulation --seeds $(SEEDS) --first $(FIRST)

# A seeded chaos run on its own Kafka/Postgres in .cache/chaos, then the verdict table; e.g.
# make chaos CHAOS_ARGS="--transactions 2000 --faults 40 --seed 123". make test runs a
# smaller one (tests/fault/test_chaos.py).
chaos: fetch
	$(UV) run python -m services.devtools.chaos $(CHAOS_ARGS)

# Build compose/Dockerfile's image and run every recon process from it (host network) against
# the project's own Kafka and Postgres until the README transaction commits (docs/operations.md,
# "Docker"). Needs a Docker engine; IMAGE_ARGS="--local-base --start-dockerd" on a machine
# without a registry (Debian's docker.io and debootstrap, as root). Not part of `make test`.
IMAGE_ARGS ?=
image-test: fetch
	$(UV) run python -m services.devtools.image_check $(IMAGE_ARGS)

# Bring compose/docker-compose.yml up and see the README transaction commit, on a machine that
# reaches no registry (services/devtools/compose_check.py; docs/operations.md, "Docker"): a
# dockerd of its own unless one answers, the base image from debootstrap (cached), Kafka and
# Postgres images built from it (compose/local/), the stack on the host's network
# (compose/docker-compose.host.yml), then `docker-compose down -v`. Needs root, Debian's
# docker.io, docker-compose and debootstrap, as .ci/run installs them. .ci/run runs it.
compose-test: fetch
	$(UV) run python -m services.devtools.compose_check

# The same images without starting the stack, for running it by hand.
compose-images: fetch
	$(UV) run python -m services.devtools.compose_check --images-only
