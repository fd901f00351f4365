"""How recon learns what providers really did: webhook signatures and ingestion, the
planner of scheduled lookups, the drift comparison, and the reconciler's bookkeeping in
Postgres (`store.py`).

The planners and checks are pure (tests/unit/test_purity.py); the processes that run them
are in services/. Imports events and projections (the schema), never services.
"""
