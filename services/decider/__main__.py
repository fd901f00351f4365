"""`python -m services.decider`: run one decider process (run several to share the
partitions; they rebalance and fence each other)."""

from services.decider.runtime import run_decider
from services.lifecycle import run_process

if __name__ == "__main__":
    run_process("decider", run_decider)
