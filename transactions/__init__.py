"""The rules of a transaction, as one library every process asks: its state
(`state.py`), `decide` and `evolve` (`transaction.py`), and what they lean on: the
approval gate (`approvals.py`), agent sessions and the fence (`ownership.py`), the evidence
an event keeps (`evidence.py`), revisions (`revisions.py`), the class of a leg's call
(`side_effects.py`), the bounds on what a live transaction keeps (`input_bounds.py`) and a
finished transaction's marker (`finished.py`).

Pure: no I/O, no clock, no randomness. Imports only the vocabulary (events). The decider
(services/decider) runs it against Kafka; the intake folds a transaction's projected events
with the same `evolve` and asks the same rules before it answers. The rules an operation's
legs and the projection share (`events/legs.py`, `events/attempt_gate.py`,
`events/approval_ledger.py`) stay in events, which the projection may import.
"""
