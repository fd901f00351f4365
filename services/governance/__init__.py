"""Governance shared by the intake and the dispatcher (docs/design.md, "Governance"): the pure
policy gate (gate.py), and where its state lives in Postgres (store.py). Not a process:
imports events and the shared modules of services/, never a process's package.
"""
