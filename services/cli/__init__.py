"""Operator commands (`python -m services.cli --help`): drift and the audit of the log.

Read-only against Kafka (no consumer group, nothing written); the audit rebuild writes only
into the fresh database it is given. May import every library folder and the reconciler's
runtime (for `drift --scan`); no process imports it.
"""
