"""The decider: the single writer of recon.events, the transaction rules
(transactions/) bound to Kafka. runtime.py runs decide and record inside Kafka
transactions, restore.py rebuilds a partition's state on assignment, finished_index.py
finds a finished transaction's marker again, dispatch_log.py logs each dispatch,
dispatch_host.py makes the provider calls of the dispatches a transaction committed (with the
call plan's library, services/dispatcher/) and hands their answers to the next transaction.
Imports events, transactions and the shared process plumbing of services/, never another
process.
"""
