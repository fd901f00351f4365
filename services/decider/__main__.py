"""`python -m services.decider`: run one decider process (run several to share the
partitions; they rebalance and fence each other). It also calls the providers for the
dispatches it commits (services.decider.dispatch_host), so it starts only on a database at
the code's schema version: the gate and `calls_begun` are in Postgres (unless its calls are
off, RECON_DECIDER_CALLS, for tests that play the provider's part)."""

from services.decider.runtime import run_decider
from services.lifecycle import run_process

if __name__ == "__main__":
    run_process("decider", run_decider, database=lambda settings: settings.decider_calls)
