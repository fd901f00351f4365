"""Dispatch: calls providers for OperationDispatched events and reports what it saw as
observations. It never decides state.

call_plan.py is the pure plan of one call; executor.py runs it against Postgres (the gate
of gatekeeper.py, calls_begun.py) and the provider adapters, for whichever process hosts
dispatch (the decider: services/decider/dispatch_host.py), and hands each observation to the
host's report sink; statement_batch.py makes the same question asked by the calls started
together one statement. Imports events, governance, providers and the shared process
plumbing; never another process.
"""
