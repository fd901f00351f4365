-- Version 1: recon's schema as the processes of the last release before versioned
-- migrations created it at start-up (projections/schema.sql, services/governance/schema.sql,
-- reconcilers/store.py and services/intake/console/sessions.py of that release, in the order
-- a process applied them), frozen here. Every statement is idempotent: on an empty database it
-- builds version 1; on a database made by an older release it brings the tables up to version
-- 1 the way that release's start-up would have. A database made by that release itself is
-- recognised by the digests it recorded (services/migrate.py) and marked without running this.
-- Never edit this file: a change to the schema is a new migration after it.


CREATE TABLE IF NOT EXISTS schema_applied (
    digest     text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- ---- projections (projections/schema.sql) ----
-- recon's Postgres schema. Every statement is idempotent: the first process to start with
-- this text applies it under an advisory lock and records its digest (projections.schema),
-- so there is no separate migration step yet. Later start-ups find the digest and run none
-- of it: ALTER TABLE takes an AccessExclusiveLock even when there is nothing to alter.

-- The intake's guard: the first body accepted under (tenant, tx_id). A unique key makes
-- concurrent identical submissions collapse into one and different ones conflict.
CREATE TABLE IF NOT EXISTS intents (
    tenant      text NOT NULL,
    tx_id       text NOT NULL,
    fingerprint text NOT NULL,
    agent_id    text NOT NULL,
    operations  jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, tx_id)
);

-- Append-only copy of recon.events.
CREATE TABLE IF NOT EXISTS events (
    tenant         text NOT NULL,
    tx_id          text NOT NULL,
    seq            integer NOT NULL,
    event_id       text NOT NULL UNIQUE,
    type           text NOT NULL,
    schema_version integer NOT NULL,
    causation_id   text NOT NULL,
    correlation_id text NOT NULL,
    occurred_at    timestamptz NOT NULL,
    prev_hash      text NOT NULL,
    hash           text NOT NULL,
    data           jsonb NOT NULL,
    PRIMARY KEY (tenant, tx_id, seq)
);

CREATE TABLE IF NOT EXISTS transactions (
    tenant      text NOT NULL,
    tx_id       text NOT NULL,
    status      text NOT NULL,
    agent_id    text NOT NULL,
    last_seq    integer NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, tx_id)
);

CREATE TABLE IF NOT EXISTS operations (
    tenant     text NOT NULL,
    tx_id      text NOT NULL,
    action     text NOT NULL,
    position   integer NOT NULL,
    kind       text NOT NULL,
    provider   text NOT NULL,
    operation  text NOT NULL,
    op_key     text NOT NULL,
    state      text NOT NULL,
    attempts   integer NOT NULL,
    remote_id  text,
    evidence   jsonb NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, tx_id, action)
);
CREATE INDEX IF NOT EXISTS operations_state ON operations (state, updated_at);
-- The undo of an operation (saga compensation) and the open review, for the webhook
-- ingress (which finds an operation by either key) and the pull reconciler.
ALTER TABLE operations ADD COLUMN IF NOT EXISTS comp_op_key text;
ALTER TABLE operations ADD COLUMN IF NOT EXISTS comp_state text;  -- NULL until dispatched
ALTER TABLE operations ADD COLUMN IF NOT EXISTS comp_attempts integer NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN IF NOT EXISTS open_review_id text;
CREATE INDEX IF NOT EXISTS operations_op_key ON operations (op_key);
CREATE INDEX IF NOT EXISTS operations_comp_op_key ON operations (comp_op_key);

-- Next offset to read per partition of recon.events, written in the same database
-- transaction as the rows it produced: the projection is exactly-once.
CREATE TABLE IF NOT EXISTS projection_offsets (
    topic       text NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint NOT NULL,
    PRIMARY KEY (topic, partition)
);

-- occurred_at exactly as it was hashed: an auditor recomputes the chain from what the API
-- returns, and a timestamptz round trip may spell the same instant differently.
ALTER TABLE events ADD COLUMN IF NOT EXISTS occurred_at_text text;

-- The manual-review queue, projected from OperationNeedsReview / ReviewResolved in the same
-- database transaction as the operation they concern.
CREATE TABLE IF NOT EXISTS reviews (
    id          text PRIMARY KEY,  -- the review id (events.keys.review_id)
    tenant      text NOT NULL,
    tx_id       text NOT NULL,
    action      text NOT NULL,
    leg         text NOT NULL,
    op_key      text NOT NULL,     -- the key of the leg under review
    attempt     integer NOT NULL,
    reason      text NOT NULL,
    state       text NOT NULL,     -- open | resolved
    created_at  timestamptz NOT NULL,
    resolved_at timestamptz,
    resolution  text,
    note        text,
    actor       text
);
CREATE INDEX IF NOT EXISTS reviews_tenant_state ON reviews (tenant, state, created_at);
CREATE INDEX IF NOT EXISTS reviews_tx ON reviews (tenant, tx_id);

-- The intake's guard for POST /v1/reviews/{id}/resolve: the first resolution claims the
-- review; `produced` turns true once ResolveReview is acknowledged by Kafka, so a client
-- retrying after a 503 (same body) produces again instead of being refused.
CREATE TABLE IF NOT EXISTS review_resolutions (
    review_id  text PRIMARY KEY,
    tenant     text NOT NULL,
    resolution text NOT NULL,
    note       text NOT NULL,
    actor      text NOT NULL,
    produced   boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- DriftDetected reports from recon.drift. The id is derived from what was found, so a
-- drift found again is the same row (ON CONFLICT DO NOTHING): each is reported once.
-- tenant is NULL for an effect that matches no intent (see README, "Drift").
CREATE TABLE IF NOT EXISTS drift (
    drift_id    text PRIMARY KEY,
    tenant      text,
    kind        text NOT NULL,
    provider    text NOT NULL,
    tx_id       text,
    action      text,
    op_key      text,
    effect_id   text,
    detail      jsonb NOT NULL,
    detected_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS drift_tenant ON drift (tenant, detected_at);

-- Webhook deliveries already turned into an observation or a drift report, per provider,
-- kept for the dedupe horizon (RECON_WEBHOOK_DEDUPE_HORIZON_S, at least 3 days) and in
-- Postgres, so a restart of the intake does not reopen the window.
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    provider    text NOT NULL,
    delivery_id text NOT NULL,
    received_at timestamptz NOT NULL,
    PRIMARY KEY (provider, delivery_id)
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_received ON webhook_deliveries (received_at);

-- Replaced by intent_keys below (the containment lookup it served ran as a sequential scan
-- under a generic plan); dropped so that intents do not pay for it on every insert.
DROP INDEX IF EXISTS intents_operations;

-- Whether Kafka acknowledged the intent's SubmitTransaction (issue 7, item 4). Until it
-- has, the row is no promise: GET answers 404 and, once `attempted_at` (the last produce
-- attempt) is older than RECON_PENDING_HORIZON_S and no transaction was projected, a
-- different body may take the tx_id over (services.intake.intents). Rows written before
-- the column existed were answered 202, hence true for them and false for new rows.
ALTER TABLE intents ADD COLUMN IF NOT EXISTS produced boolean NOT NULL DEFAULT true;
ALTER TABLE intents ALTER COLUMN produced SET DEFAULT false;
ALTER TABLE intents ADD COLUMN IF NOT EXISTS attempted_at timestamptz NOT NULL DEFAULT now();
-- The tenant's policy version the intake checked the submission under: a dispatcher whose
-- cached policy is older re-reads it before deciding (services.dispatcher.gatekeeper).
ALTER TABLE intents ADD COLUMN IF NOT EXISTS policy_version integer NOT NULL DEFAULT 0;
-- The submitting session, the transaction's first owner: a claim answered before the
-- projection shows the transaction is judged against it (services.intake.ownership).
ALTER TABLE intents ADD COLUMN IF NOT EXISTS session_id text;
-- The principal that submitted the intent (services.intake.auth.Principal.name); NULL for
-- the Kafka door and for intents from before it was recorded.
ALTER TABLE intents ADD COLUMN IF NOT EXISTS submitted_by text;
-- The task the submission named (events.policy.TaskGrant), the authority it acts under:
-- every dispatcher re-judges it right before each forward call, so a task revoked or
-- expired after the submission stops calls not yet made. NULL: no task named.
ALTER TABLE intents ADD COLUMN IF NOT EXISTS task_id text;
-- When an abort of the transaction was first asked through the API (services.intake.
-- abort_record), written before its AbortTransaction is produced. The dispatcher's last gate
-- (services/dispatcher/calls_begun.py) reads it in the statement that begins a call: a step's
-- call not begun by then never is (issue 18, item 17). NULL: no abort asked.
ALTER TABLE intents ADD COLUMN IF NOT EXISTS abort_requested_at timestamptz;
-- The same for a review's resolution claim (`produced` above): a different resolution may
-- take over an unacknowledged claim once its last attempt is older than the horizon.
ALTER TABLE review_resolutions
    ADD COLUMN IF NOT EXISTS attempted_at timestamptz NOT NULL DEFAULT now();

-- Every idempotency key of an intent (each leg's op_key and compensation key), written
-- with the intent row: the webhook ingress finds the operation an effect belongs to by
-- primary key whatever plan Postgres picks (issue 7, item 17), where the jsonb
-- containment lookup on intents ran as a sequential scan under a generic plan.
CREATE TABLE IF NOT EXISTS intent_keys (
    key    text PRIMARY KEY,
    tenant text NOT NULL,
    tx_id  text NOT NULL,
    action text NOT NULL,
    leg    text NOT NULL,  -- forward | compensation
    FOREIGN KEY (tenant, tx_id) REFERENCES intents (tenant, tx_id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS intent_keys_tx ON intent_keys (tenant, tx_id);
-- Once, for intents written before the table existed.
INSERT INTO intent_keys (key, tenant, tx_id, action, leg)
SELECT k.key, i.tenant, i.tx_id, op->>'action', k.leg
FROM intents i, jsonb_array_elements(i.operations) op,
     LATERAL (VALUES (op->>'op_key', 'forward'),
                     (op->>'compensation_key', 'compensation')) AS k(key, leg)
WHERE k.key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM intent_keys LIMIT 1)
ON CONFLICT (key) DO NOTHING;

-- The reconciler's reads of `events`: its drift scan finds the legs dispatched in its
-- window (by occurred_at) and whether recon ever issued an effect's key (by op_key), both
-- on OperationDispatched only. Without these each scan reads the whole audit log.
CREATE INDEX IF NOT EXISTS events_dispatched_op_key ON events ((data->>'op_key'))
    WHERE type = 'OperationDispatched';
CREATE INDEX IF NOT EXISTS events_dispatched_at ON events (occurred_at)
    WHERE type = 'OperationDispatched';

-- GET /v1/transactions: a tenant's transactions newest first, paged by (created_at, tx_id).
CREATE INDEX IF NOT EXISTS transactions_tenant_created
    ON transactions (tenant, created_at DESC, tx_id DESC);

-- Intent identity (issue 22, events.intent_identity): which transaction holds a step's
-- natural key for an operation, until `expires_at` (the operation's declared window). Written
-- with the intent row, before its command is produced (services.intake.natural_keys): the
-- primary key is where two submissions of one business intent under two tx_ids meet.
CREATE TABLE IF NOT EXISTS natural_keys (
    tenant           text NOT NULL,
    operation        text NOT NULL,
    natural_key      text NOT NULL,
    tx_id            text NOT NULL,
    action           text NOT NULL,
    -- the call the holder makes (provider, operation, payload): the same call again is a
    -- duplicate, another one is sent to a person
    step_fingerprint text NOT NULL,
    claimed_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (tenant, operation, natural_key)
);
CREATE INDEX IF NOT EXISTS natural_keys_tx ON natural_keys (tenant, tx_id);

-- The canonical form an event's hash was computed in (events.envelope, docs/canonical-form.md):
-- `jcs` for the events sealed since forms were named, NULL for the legacy-json ones. Kept so
-- that GET /v1/transactions/{tx_id}/events returns every field the hash covers.
ALTER TABLE events ADD COLUMN IF NOT EXISTS canon text;

-- ---- governance (services/governance/schema.sql) ----
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

-- ---- reconciler (reconcilers/store.py) ----

CREATE TABLE IF NOT EXISTS reconciler_leases (
    op_key              text NOT NULL,
    attempt             integer NOT NULL,
    lookups             integer NOT NULL,
    next_at             timestamptz NOT NULL,
    last_outcome        text,
    review_requested_at timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (op_key, attempt)
);
-- Added later: rows from before count as asked 0 times, never given up.
ALTER TABLE reconciler_leases ADD COLUMN IF NOT EXISTS review_requests integer NOT NULL DEFAULT 0;
ALTER TABLE reconciler_leases ADD COLUMN IF NOT EXISTS given_up_at timestamptz;
CREATE INDEX IF NOT EXISTS reconciler_leases_given_up ON reconciler_leases (op_key)
    WHERE given_up_at IS NOT NULL;
-- Drift ids already produced to recon.drift, so the next scan does not report them again.
CREATE TABLE IF NOT EXISTS reconciler_drift_reported (
    drift_id    text PRIMARY KEY,
    kind        text NOT NULL,
    reported_at timestamptz NOT NULL
);

-- ---- console sessions (services/intake/console/sessions.py) ----

CREATE TABLE IF NOT EXISTS console_sessions (
    token_sha256 text PRIMARY KEY,
    tenant       text NOT NULL,
    person       text NOT NULL,
    csrf         text NOT NULL,
    expires_at   timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS console_sessions_expiry ON console_sessions (expires_at);

