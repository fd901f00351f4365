-- Version 10: who claimed a held dispatch (services/governance/store.py, claim_released). A
-- resumer forgets the hold it resumed, or renews its claim, only while the claim is still its
-- own: a hold written again while it resumed (a switch engaged again) clears the claim, and
-- another dispatcher may claim it and die; the first one's forget used to delete that row
-- whatever the claim, and the leg was then never called again (a transaction that never
-- finishes; found by the simulator, tests/simulation, seed 2337). Nullable, no default:
-- adding it rewrites nothing, and a row claimed before it has no claimer, so no forget
-- matches it: its claim lapses and it is claimed again.
ALTER TABLE held_dispatches
    ADD COLUMN IF NOT EXISTS claimed_by text;
