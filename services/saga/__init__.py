"""The saga orchestrator: turns failure events into ordered compensation commands.

reactor.py is pure; runtime.py runs it under the at-least-once policy
(services/at_least_once.py). Imports events and the shared process plumbing, never
another process.
"""
