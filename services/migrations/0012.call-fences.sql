-- Version 12: the fence of each partition's owner (services/dispatcher/call_fence.py). The
-- decider that takes a partition initialises its transactional producer, which fences every
-- earlier one in Kafka, and writes the producer id and epoch it was given here; a claim
-- or a begin of a call (calls_begun.claim, begin_many) carrying an older one is refused,
-- so a zombie (a process that lost the partition and has not noticed) never calls again
-- on its stale state once the new owner took over. One row per transactional id, written
-- at each take (a few a rebalance), read by a primary-key probe in the claim's and the
-- begin's statements; none for an owner that never took a partition since this version:
-- its calls are not refused.
CREATE TABLE IF NOT EXISTS call_fences (
    owner text PRIMARY KEY,
    producer_id bigint NOT NULL,
    epoch integer NOT NULL
);
