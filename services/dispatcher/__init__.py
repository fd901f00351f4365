"""The dispatcher: calls providers for OperationDispatched events and reports what it
saw as observations. It never decides state.

runtime.py runs under the at-least-once policy (services/at_least_once.py); in_flight.py
asks the projection whether a dispatch is still wanted. Imports events, projections (the
schema) and the shared process plumbing; never another process.
"""
