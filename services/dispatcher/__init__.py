"""The dispatcher: calls providers for OperationDispatched events and reports what it
saw as observations. It never decides state.

call_plan.py is the pure plan of one call; executor.py runs it against Postgres (the gate
of gatekeeper.py, calls_begun.py) and the provider adapters, for whichever process hosts
dispatch, and hands each observation to the host's report sink. runtime.py is the
standalone host: it reads recon.events under the at-least-once policy
(services/at_least_once.py) and sends the observations to recon.observations; in_flight.py
asks the projection whether a dispatch is still wanted. Imports events, projections (the
schema) and the shared process plumbing; never another process.
"""
