-- Governance state (services.governance.store). Kafka (recon.governance) holds the history
-- of every change; these tables hold what is in force now, for the intake's gate and every
-- dispatcher to read.

CREATE TABLE IF NOT EXISTS governance_policies (
    tenant      text PRIMARY KEY,
    version     integer NOT NULL,
    digest      text NOT NULL,
    document    jsonb NOT NULL,
    actor       text NOT NULL,
    set_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE IF NOT EXISTS kill_switches (
    switch_id    text PRIMARY KEY,
    tenant       text NOT NULL,
    scope        jsonb NOT NULL,
    reason       text NOT NULL,
    engaged_by   text NOT NULL,
    engaged_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    released_by  text,
    released_at  timestamptz
);
CREATE INDEX IF NOT EXISTS kill_switches_engaged ON kill_switches (tenant)
    WHERE released_at IS NULL;

-- One row per dispatch counted against a quota, by its key: a re-delivered dispatch, a
-- lookup-first retry or a review `retry` of the same key is not counted twice.
CREATE TABLE IF NOT EXISTS quota_claims (
    tenant      text NOT NULL,
    agent_id    text NOT NULL,
    operation   text NOT NULL,
    op_key      text NOT NULL,
    amount      bigint NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, op_key)
);
CREATE INDEX IF NOT EXISTS quota_claims_window
    ON quota_claims (tenant, agent_id, operation, claimed_at);

-- A tripped breaker stays open until an operator resets it: a run-away loop stays stopped
-- even once its window has moved on.
CREATE TABLE IF NOT EXISTS quota_breakers (
    tenant      text NOT NULL,
    agent_id    text NOT NULL,
    operation   text NOT NULL,
    tripped_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    op_key      text NOT NULL,
    quota       jsonb NOT NULL,
    refused     integer NOT NULL DEFAULT 1,
    PRIMARY KEY (tenant, agent_id, operation)
);

-- Dispatches a kill switch stopped: kept here (never dropped) and dispatched by whichever
-- dispatcher claims them once no switch matches any more.
CREATE TABLE IF NOT EXISTS held_dispatches (
    tenant         text NOT NULL,
    op_key         text NOT NULL,
    attempt        integer NOT NULL,
    tx_id          text NOT NULL,
    action         text NOT NULL,
    agent_id       text NOT NULL,
    provider       text NOT NULL,
    operation      text NOT NULL,
    partition      integer NOT NULL,
    envelope       text NOT NULL,
    switch_ids     text[] NOT NULL,
    held_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    claimed_until  timestamptz,
    PRIMARY KEY (tenant, op_key, attempt)
);

-- Stored previews (services.intake.preview_store): what an approval is checked against.
-- Bounded: a new preview of a proposal replaces the older ones (an approval must name the
-- latest), and a preview is deleted PREVIEW_RETENTION_S after it was made.
CREATE TABLE IF NOT EXISTS previews (
    tenant          text NOT NULL,
    preview_id      text NOT NULL,
    tx_id           text NOT NULL,
    proposal_digest text NOT NULL,
    digest          text NOT NULL,
    body            jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, preview_id)
);
CREATE INDEX IF NOT EXISTS previews_by_proposal ON previews (tenant, proposal_digest, created_at);
CREATE INDEX IF NOT EXISTS previews_by_age ON previews (created_at);
-- One row per provider call a dispatcher is about to make, written (services/dispatcher/
-- calls_begun.py) after every gate and precondition and right before the call, in the one
-- statement that also checks the engaged kill switches. Its presence, not an offset, is what
-- makes a dispatch a redelivery: "a previous owner may have sent this" is exactly "a row
-- exists", and "it never saw this" is "no row".
-- An upgrade from a version without the table: every leg the projection shows in flight
-- then may have been sent by a dispatcher that wrote no row, so it gets one when the table
-- is created (looked up before anything is sent again, and looked up by the reconciler).
-- Without it such a leg, its dispatch already consumed, would be taken for one no
-- dispatcher had picked up yet, and never looked up at all.
DO $$
BEGIN
    IF to_regclass('calls_begun') IS NULL THEN
        CREATE TABLE calls_begun (
            tenant      text NOT NULL,
            op_key      text NOT NULL,
            leg         text NOT NULL,
            attempt     integer NOT NULL,
            begun_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
            PRIMARY KEY (tenant, op_key, leg, attempt)
        );
        IF to_regclass('operations') IS NOT NULL THEN
            INSERT INTO calls_begun (tenant, op_key, leg, attempt)
            SELECT tenant, op_key, 'forward', attempts FROM operations
             WHERE state IN ('dispatched', 'unknown') AND attempts > 0
            UNION ALL
            SELECT tenant, comp_op_key, 'compensation', comp_attempts FROM operations
             WHERE comp_state IN ('dispatched', 'unknown') AND comp_op_key IS NOT NULL
            ON CONFLICT DO NOTHING;
        END IF;
    END IF;
END $$;
-- The reconciler's purge (reconcilers.store) finds old rows of settled legs by their age.
CREATE INDEX IF NOT EXISTS calls_begun_by_age ON calls_begun (begun_at);
