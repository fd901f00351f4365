-- Version 8: the drift scan's cursor per provider account (reconcilers/drift_span.py): the
-- creation instant up to which that account's effects, and the legs whose calls went to it,
-- were judged. A scan asks the account for what was created since the cursor less the grace
-- and judges only what lies between the cursor and its own `now` less the grace, instead of
-- re-reading the whole RECON_DRIFT_WINDOW_S at every RECON_DRIFT_INTERVAL_S. The cursor moves
-- (forward only) over a whole listing alone: a cut or unavailable one leaves it where it was,
-- so what that scan could not judge is judged by a later one. `account` is the tenant whose
-- own account it is, '' for the provider's shared account (a primary key holds no NULL).
-- No row: the account was never scanned whole; its first scan judges the window.
CREATE TABLE IF NOT EXISTS reconciler_drift_cursors (
    provider   text        NOT NULL,
    account    text        NOT NULL,
    judged_to  timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (provider, account)
);
