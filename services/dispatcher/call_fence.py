"""Whose turn it is to call for a partition: the fence of the partition's owner, checked by a
redelivery's claim (services.dispatcher.calls_begun, `call_fences`).

Why: a zombie (a decider process that lost a partition but has not noticed yet: paused
past its session, or cut off from Kafka but not from Postgres and the providers) goes on
calling on its own state, which stopped at the revocation. Its redelivery (a retry of a
plan that failed, a call made again once it ended: DispatchHost._carry, `again`) claims a
begun call, and once the new owner's lease on it ends (it is kept while the owner owns the
partition, and lapses), its claim takes the call, asks its own stale state whether the
transaction still waits (it does, there), looks up, finds a declined charge absent and,
the charge not being destructive, sends it again: after the new owner may have failed the
transaction (a person, or a compensation after the decline), harmless only if the
provider repeats its refusal for the key (docs/decider.md, "A zombie's resend", for the
numbered timeline). The lease cannot tell: it says who is on the wire, not whose state
counts.

Kafka already says whose state counts: the partition's transactions are written by the
transactional producer `recon-decider-<p>`, and whoever takes the partition initialises
it, which fences every earlier producer of the id (services.decider.runtime, `take`). The
id's producer id and epoch after that initialisation only grow with each take (a new
producer id, allocated above every earlier one, once an epoch runs out), so they are the
fence: the new owner writes its own to `call_fences` when it takes the partition, before
its take-over calls, and a claim that carries an older one is refused (`Claimed.
SUPERSEDED`: the plan ends as a claim given up does, call_plan.Turn.GIVEN_UP, nothing
looked up, sent or reported), as is a begin (`Begun.superseded`: nothing written; a
zombie's first send, such as a released hold its gate loop claimed, or the last gate after
a redelivery's lookup). The fence and the transactions are fenced by one token, so a
process whose transactions Kafka refuses is refused its redeliveries too, however late it
notices; and a zombie that takes the partition back (its retake after a failed transaction
initialises the id again) is the owner again for both.

Tokens are Kafka's, so they order only the takes of one cluster: brokers replaced under
one database (a new cluster, restored or migrated into) give producer ids that start again
from low numbers. So a fence names its cluster too (the id the brokers' metadata answers
carry), and the database orders the clusters by their arrival (`kafka_clusters`, written
by a take's fence; migration 0013): a cluster first seen later is newer, and its tokens
supersede every token of the clusters before it, whatever their numbers. A move to new
brokers needs no hand: the new cluster's takes win each partition, and whatever the old
cluster's processes still do (a zombie that never reached the new brokers, or a
misconfigured one still running) is refused from then on, since a write only ever moves a
partition's fence forward in the one order (arrival, producer id, epoch), never back. Two
clusters writing one database at once thus leave calls only to the later one. What it
cannot tell is a return to a cluster the database has left, or a cluster whose own
metadata was rewound to an older backup (same id, smaller ids again): both look like a
zombie, are refused, and need the operator's one statement (docs/operations.md).

The take is two writes: the producer's initialisation (Kafka), then the fence (Postgres,
DispatchHost.fenced, in a task retried while Postgres is away). Between the two (the
statement's round trip; longer while Postgres is away for the new owner but not for the
zombie), or if the new owner dies between them, a zombie's claim is not refused yet: as
before the fence existed. The next take writes a newer one.

Pure: no I/O, no clock.
"""

from dataclasses import dataclass

# Kafka's limit on a transactional id's length.
MAX_OWNER_CHARS = 249
# A cluster id is a UUID in base64, 22 characters (`kafka-storage random-uuid`); room for
# one an operator formatted with another string.
MAX_CLUSTER_CHARS = 64
# A producer id is a non-negative 64-bit integer (Postgres bigint); an epoch a 16-bit one
# that Kafka never lets reach its maximum.
MAX_PRODUCER_ID = 2**63 - 1
MAX_EPOCH = 2**15 - 1


@dataclass(frozen=True, order=True)
class Fence:
    """A partition owner's turn: its transactional id (`owner`, whose fence this is), the
    producer id and epoch its initialisation was given, and the Kafka cluster that gave
    them. Ordered by (producer id, epoch) within one owner and one cluster only: across
    clusters the database's arrival order decides (module docstring)."""

    owner: str
    producer_id: int
    epoch: int
    cluster: str

    def __post_init__(self) -> None:
        if type(self.cluster) is not str or not 0 < len(self.cluster) <= MAX_CLUSTER_CHARS:
            raise ValueError(
                f"a call fence's cluster is a Kafka cluster id of 1-{MAX_CLUSTER_CHARS}"
                f" characters (the brokers' metadata answer), got {self.cluster!r:.80}"
            )
        if not 0 < len(self.owner) <= MAX_OWNER_CHARS:
            raise ValueError(
                f"a call fence's owner is a transactional id of 1-{MAX_OWNER_CHARS}"
                f" characters, got {self.owner!r:.80}"
            )
        for name, value, top in (
            ("producer id", self.producer_id, MAX_PRODUCER_ID),
            ("epoch", self.epoch, MAX_EPOCH),
        ):
            if type(value) is not int or not 0 <= value <= top:
                raise ValueError(
                    f"a call fence's {name} is an integer from 0 to {top} (the one Kafka"
                    f" gave the producer's initialisation), got {value!r}"
                )
