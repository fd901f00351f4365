-- Version 14: a transaction's row holds who owns it and how many commands from agent
-- sessions it took (projections.view.TxView's `owner` and `session_events`, moved by the
-- decider's own transactions.ownership.evolve_owner and transactions.input_bounds'
-- SESSION_CAUSED), so that the intake judges a session's claim, release, abort or review
-- request on one row instead of folding the transaction's whole projected chain for each
-- (services.intake.ownership.known_transaction; docs/benchmark.md, "A session's command
-- and its transaction's chain"). The projector writes them in the statement that writes
-- the events they come from.
--
-- `session_seq` is the `last_seq` they were projected at: they hold only when it equals
-- the row's `last_seq`. Rows written before this version (NULL), or moved on by a
-- projector of the previous release during a rolling upgrade (it writes the v1 type and
-- leaves these columns as they were), do not qualify: the intake then folds the chain as
-- before, and the projector keeps such a row's columns unknown until `audit rebuild`
-- writes them from the log.
ALTER TABLE transactions
    ADD COLUMN IF NOT EXISTS owner jsonb,
    ADD COLUMN IF NOT EXISTS session_events integer,
    ADD COLUMN IF NOT EXISTS session_seq integer;

-- A type is never altered (0006): the next projector writes this one.
CREATE TYPE transactions_batch_v2 AS (
    tenant         text,
    tx_id          text,
    status         text,
    agent_id       text,
    last_seq       integer,
    created_at     timestamptz,
    updated_at     timestamptz,
    owner          jsonb,
    session_events integer,
    session_seq    integer
);
