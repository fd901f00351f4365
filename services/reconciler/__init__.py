"""The pull reconciler and the drift scan, on a schedule (APScheduler)."""
