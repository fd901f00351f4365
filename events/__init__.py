"""The vocabulary of recon: commands, observations, events, envelopes, keys, topics, and
the legs of an operation with the rules that move their status (`legs.py`).

Everything in this package is pure: no I/O, no clock, no randomness. It imports nothing of
recon's other folders (projections, reconcilers, services): everything else speaks it.
"""
