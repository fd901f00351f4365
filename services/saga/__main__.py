"""`python -m services.saga`: run the saga orchestrator until SIGINT or SIGTERM."""

from services.lifecycle import run_process
from services.saga.runtime import run_saga

if __name__ == "__main__":
    run_process("saga", run_saga)
