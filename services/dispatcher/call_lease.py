"""Who is making a call, and until when: the lease on a `calls_begun` row (services.
dispatcher.calls_begun, `holder` and `held_until`).

Why: the `calls_begun` row says a call of an attempt was begun, so a redelivery looks it up
before it sends again. But a lookup made while the first call is still on the wire finds
nothing yet, and a write found absent is sent again: two requests of one attempt at the
provider at once, safe only with a provider that deduplicates concurrent requests of one
idempotency key. That happens at every rebalance that moves a partition while its owner
has a call in flight: the new owner's take-over runs while the old owner's call goes on.
So the process that begins a call holds it under a lease, and a process that would look
it up first claims it (call_plan.Claim), waiting while another holds it live: until the
other lets it go (it lost the call's partition and the call is not on the wire:
services.dispatcher.held_leases) or its lease lapses (it died or hung). The holder is the
process, never one call: a process claims its own leases at once.

The lease is the call's own time bound: a request to a provider waits at most the
provider timeout for a connection and again for its answer (services.providers.http), so
REQUEST_BOUND times that, per request the holder may still make (a first send: the apply;
a claim: a lookup, a balance and the apply). The holder enforces it on itself: an apply
is not sent once its lease has ended, and is cut when it ends (an `unknown` answer,
settled by lookups), measured on its own clock from before the statement that took the
lease, so it ends before the lease Postgres keeps, which starts later and is LEASE_MARGIN_S
longer. A holder that dies mid-call is waited for until its lease lapses: that is the
price of a crash, paid only by the legs the dead process was calling.

Pure: no I/O, no clock.
"""

# A provider request waits at most the provider timeout to connect and again to read its
# answer (ProviderHttp: `connect` and `sock_read`).
REQUEST_BOUND = 2
# The requests a first send holds its lease for (the apply), and a claim (the lookup, a
# later attempt's balance, the apply).
BEGIN_REQUESTS = 1
CLAIM_REQUESTS = 3
# Postgres's lease outlasts the holder's own bound by this much: the holder's clock starts
# before the statement that takes the lease, and two clocks never agree exactly.
LEASE_MARGIN_S = 2.0
# How often a claim asks again while another process holds the call.
CLAIM_POLL_S = 0.25


def held_s(provider_timeout_s: float, requests: int) -> float:
    """How long the holder may go on with its call: it sends nothing after this."""
    return REQUEST_BOUND * provider_timeout_s * requests


def lease_s(provider_timeout_s: float, requests: int) -> float:
    """The lease Postgres keeps for it: past it, another process may look the call up."""
    return held_s(provider_timeout_s, requests) + LEASE_MARGIN_S
