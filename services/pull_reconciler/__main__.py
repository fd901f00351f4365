"""`python -m services.pull_reconciler`: look up stuck operations and scan for drift."""

from services.lifecycle import run_process
from services.pull_reconciler.runtime import run_reconciler

if __name__ == "__main__":
    run_process("reconciler", run_reconciler, database=True)
