-- Version 13: the call fence names its Kafka cluster (services/dispatcher/call_fence.py).
-- A producer id and epoch order the takes of one cluster only; brokers replaced under this
-- database give smaller ones again, which 0012's fences refused at every call until an
-- operator deleted the rows. Now each cluster is registered at its first take's fence
-- (`kafka_clusters`, its `arrival` from a sequence: a cluster first seen later is newer),
-- and a partition's fence is ordered by (arrival, producer_id, epoch): a new cluster's takes
-- supersede every old cluster's token, and the old cluster's processes are refused from
-- then on. Returning to a cluster the database has left is the one hand step: `UPDATE
-- kafka_clusters SET arrival = DEFAULT WHERE cluster_id = ...` (docs/operations.md).
CREATE TABLE IF NOT EXISTS kafka_clusters (
    cluster_id text PRIMARY KEY,
    arrival bigint GENERATED ALWAYS AS IDENTITY
);

-- Fences written before this version, or by a release before it during a rolling upgrade,
-- name no cluster: 0, which the statements read as the reader's own cluster (the one in
-- use when they were written), so they refuse what they refused, and a later take of the
-- same cluster writes over them as before.
ALTER TABLE call_fences ADD COLUMN IF NOT EXISTS arrival bigint NOT NULL DEFAULT 0;
