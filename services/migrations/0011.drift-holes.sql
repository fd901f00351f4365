-- Version 11: the part of an account's drift span that a cut listing left unjudged
-- (reconcilers/drift_span.py, Hole). A listing cut at its page cap covers only its newest
-- effects; before this the cursor stayed put, every later scan listed the same newest pages,
-- and what lay below the cut (an effect without intent, a confirmed leg without its effect)
-- was never judged. Now a scan of an adapter that can list below an instant (`lists_until`)
-- moves the cursor on and records [hole_from, hole_to) here; later scans list that hole from
-- its top down, a page cap at a time, until it closes (both NULL). Written in the same
-- transaction as the cursor (store.advance_drift_cursors, store.write_drift_holes), so no
-- span is marked judged that was not. Nullable, no default: adding them rewrites nothing.
ALTER TABLE reconciler_drift_cursors
    ADD COLUMN IF NOT EXISTS hole_from timestamptz,
    ADD COLUMN IF NOT EXISTS hole_to   timestamptz;
