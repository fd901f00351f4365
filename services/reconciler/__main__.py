"""`python -m services.reconciler`: look up stuck operations and scan for drift."""

from services.lifecycle import run_process
from services.reconciler.runtime import run_reconciler

if __name__ == "__main__":
    run_process("reconciler", run_reconciler)
