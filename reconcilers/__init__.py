"""Reconcilers: how recon learns what providers really did (webhooks, lookups, drift scans)."""
