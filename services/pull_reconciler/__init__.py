"""The pull reconciler and the drift scan, on a schedule (APScheduler).

runtime.py runs the pure planners of reconcilers/ against the providers and Postgres.
Imports events, reconcilers, the provider adapters and the shared plumbing; never
another process.
"""
