"""Sandbox provider: a stand-in for real payment, inventory and email providers.

It runs as its own process with its own SQLite storage so that recon's dispatcher, lookups
and drift scans are exercised over real HTTP against something that behaves like a provider:
idempotency keys bound to payload fingerprints, lookup by key, a list of effects, definitive
refusals and injectable faults. See the "Sandbox provider" section of docs/contract.md.
"""
