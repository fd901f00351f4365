"""`python -m services.dispatcher`: call providers for dispatched operations."""

from services.dispatcher.runtime import run_dispatcher
from services.lifecycle import run_process

if __name__ == "__main__":
    run_process("dispatcher", run_dispatcher, database=True)
