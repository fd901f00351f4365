"""`python -m services.projector`: run the projector until SIGINT or SIGTERM."""

from services.lifecycle import run_process
from services.projector.runtime import run_projector

if __name__ == "__main__":
    run_process("projector", run_projector, database=True)
