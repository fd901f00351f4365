-- Version 6: the row types the live projector sends a batch's rows as, one array of rows per
-- table (projections/table_writes.py, `Table.batch_type`), where it sent one array per
-- column. asyncpg checks every element of an array parameter against
-- collections.abc.Iterable, a Python call each: ~330 values per transaction at c30, in ~25
-- rows. Each type lists its table's written columns in the order of `TABLES`, with the
-- table's types (tests/integration/test_projection_batch_types.py holds them to that). A
-- type is never altered: a change to what the projector writes is a new type, so a projector
-- of the previous release keeps writing while the next one is rolled out.
CREATE TYPE events_batch_v1 AS (
    tenant           text,
    tx_id            text,
    seq              integer,
    event_id         text,
    type             text,
    schema_version   integer,
    causation_id     text,
    correlation_id   text,
    occurred_at      timestamptz,
    occurred_at_text text,
    prev_hash        text,
    hash             text,
    data             jsonb,
    canon            text
);

CREATE TYPE transactions_batch_v1 AS (
    tenant     text,
    tx_id      text,
    status     text,
    agent_id   text,
    last_seq   integer,
    created_at timestamptz,
    updated_at timestamptz
);

CREATE TYPE operations_batch_v1 AS (
    tenant         text,
    tx_id          text,
    action         text,
    position       integer,
    kind           text,
    provider       text,
    operation      text,
    op_key         text,
    state          text,
    attempts       integer,
    remote_id      text,
    evidence       jsonb,
    updated_at     timestamptz,
    comp_op_key    text,
    comp_state     text,
    comp_attempts  integer,
    open_review_id text
);

CREATE TYPE reviews_batch_v1 AS (
    id          text,
    tenant      text,
    tx_id       text,
    action      text,
    leg         text,
    op_key      text,
    attempt     integer,
    reason      text,
    state       text,
    created_at  timestamptz,
    resolved_at timestamptz,
    resolution  text,
    note        text,
    actor       text
);
