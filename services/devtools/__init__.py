"""Development tools, never deployed: the sandbox provider (`sandbox/`, a stand-in for real
providers, run as its own process), local Kafka and Postgres without Docker (`infra/`),
every process started together (`stack.py`, what `make run` and the end-to-end tests use),
the benchmark (`bench.py`) and the chaos runner (`chaos/`, `make chaos`).

Production code (the other packages of services/, events, projections, reconcilers) never
imports from here (tests/unit/test_rooms.py). The sandbox imports only
reconcilers.signatures, to sign its webhooks the way a provider would.
"""
