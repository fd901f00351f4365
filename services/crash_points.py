"""Deterministic crash points for fault tests. TEST-ONLY: never set RECON_TEST_CRASH_AT in a
deployment.

A fault test that must kill a process between two exact statements (say, after a claim in
Postgres and before the Kafka send it guards) sets RECON_TEST_CRASH_AT to the point's name;
the process then ends itself there like kill -9 would: no cleanup, no finally blocks, no
flush. Unset (always, outside tests) the call is one dictionary look-up.
"""

import os

CRASH_ENV = "RECON_TEST_CRASH_AT"
CRASH_EXIT_CODE = 137  # what a shell reports for a process killed by SIGKILL


def crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        os._exit(CRASH_EXIT_CODE)
