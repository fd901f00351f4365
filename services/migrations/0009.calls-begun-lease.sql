-- Version 9: who is making a begun call, and until when (services/dispatcher/call_lease.py).
-- The begin that writes a `calls_begun` row holds its call under a lease (the holder is the
-- dispatching process; it releases its leases when it loses their partitions, else they
-- lapse: services/dispatcher/held_leases.py), and a redelivery
-- (a take-over after a rebalance) claims it before its lookup, waiting while another process
-- holds it live, so a lookup never races the call it looks for and two requests of one
-- attempt are never on the wire at once. Nullable, no default: adding them rewrites nothing,
-- and rows written before (or by the release before this one, which writes neither) have no
-- lease, which a claim takes at once, as a lookup went ahead before.
ALTER TABLE calls_begun
    ADD COLUMN IF NOT EXISTS holder text,
    ADD COLUMN IF NOT EXISTS held_until timestamptz;
