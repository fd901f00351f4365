"""The decider: the single writer of recon.events.

transaction.py is the pure state machine (with evidence.py and finished.py); runtime.py
binds it to Kafka transactions, restore.py rebuilds a partition's state on assignment.
Imports events and the shared process plumbing of services/, never another process.
"""
