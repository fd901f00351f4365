"""Rules a refusal names, in one place: the decider records them on the log
(CommandRefused.rule) and the intake answers them, so both say the same thing."""

IMMUTABLE_RULE = (
    "an accepted operation's parameters, key, provider and amount never change: a successor"
    " may continue, abort or ask for review of the recorded operations, not submit others"
    " under the same tx_id"
)
