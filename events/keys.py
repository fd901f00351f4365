"""Stable idempotency keys.

The key a provider sees for an operation is derived only from the intent's
coordinates, never from randomness or time, so every retry, every replacement
dispatcher and every replay sends the same key (promise 1). The derivation is frozen
by a test vector: changing it would make in-flight operations look new to providers.
Bump KEY_VERSION instead, and only for new transactions.
"""

from events.canonical import canonical_json, sha256_hex

KEY_VERSION = 1


def op_key(
    *,
    tenant: str,
    environment: str,
    provider: str,
    tx_id: str,
    action: str,
    version: int = KEY_VERSION,
) -> str:
    material = canonical_json(["recon.op", version, tenant, environment, provider, tx_id, action])
    return f"rk{version}_{sha256_hex(material)[:40]}"


def compensation_key(original_op_key: str, version: int = KEY_VERSION) -> str:
    """The key of the undo of an operation: derived from the original key alone, so
    the compensation is as stable as the effect it reverses."""
    material = canonical_json(["recon.compensation", version, original_op_key])
    return f"rc{version}_{sha256_hex(material)[:40]}"


def partition_key(tenant: str, tx_id: str) -> bytes:
    """Every record of one transaction goes to one partition of every topic.

    tx_id is unique per tenant only, so the tenant is part of the key; "/" cannot occur
    in either (see events.definition)."""
    return f"{tenant}/{tx_id}".encode()


def review_id(tenant: str, tx_id: str, action: str, leg: str, attempt: int) -> str:
    """One review per operation leg and attempt: a repeated request finds the same one."""
    material = canonical_json(["recon.review", tenant, tx_id, action, leg, attempt])
    return f"rv_{sha256_hex(material)[:24]}"
