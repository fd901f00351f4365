"""Provider adapters, shared by the dispatcher (apply an operation) and the pull reconciler
(look it up by key, list the provider's effects): `adapters.py` makes the HTTP calls,
`classify.py` (pure) says what an answer means.

Imports events only; never a process's package.
"""
