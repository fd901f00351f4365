"""The decider: the single writer of recon.events.

transaction.py is the pure state machine; runtime.py binds it to Kafka.
"""
