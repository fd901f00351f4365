"""`python -m services.sandbox`: where ../shared/peer-bench/compare.py starts a private
sandbox provider. The sandbox lives in services/devtools/sandbox/ (a development tool);
this entry point only forwards to it."""

import runpy

if __name__ == "__main__":
    runpy.run_module("services.devtools.sandbox", run_name="__main__", alter_sys=True)
