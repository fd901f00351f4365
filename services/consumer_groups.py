"""The consumer groups recon runs, by name (without the deployment's prefix,
`Settings.group_prefix`): the names each runtime joins with, and GROUPS, the one list of
them that the intake's `/healthz` and its group watch (services.intake.group_watch) look
at. A group that is not in GROUPS can stall, or lose its last member, unseen: a new group
is named here and joined by this name."""

DECIDER = "recon-decider"
PROJECTOR = "recon-projector"
SAGA = "recon-saga"
INTENTS = "recon-intents"

GROUPS = (DECIDER, PROJECTOR, SAGA, INTENTS)
