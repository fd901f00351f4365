"""`python -m services.bench`: where ../shared/peer-bench/compare.py runs recon's benchmark.
The benchmark lives in services/devtools/bench.py (a development tool); this entry point
only forwards to it, so production code still imports no development tool."""

import runpy

if __name__ == "__main__":
    runpy.run_module("services.devtools.bench", run_name="__main__", alter_sys=True)
