"""`python -m services.projector`: run the projector until SIGINT or SIGTERM."""

from services.collector import tune_for_service
from services.lifecycle import run_process
from services.projector.runtime import run_projector

if __name__ == "__main__":
    # The process's collector, not run_projector's (a test runs that in its own process):
    # with CPython's defaults it took 13-24 % of the projector's CPU at c30, each full
    # collection walking every kept view (projections.view_cache, up to 1,000 a partition,
    # long-lived and freed by reference counting) and pausing the loop for 50-110 ms,
    # longer as the cache grows (docs/benchmark.md, "The projector's collector").
    tune_for_service()
    run_process("projector", run_projector, database=True)
