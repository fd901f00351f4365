"""`audit verify`'s check of each checkpoint (services.cli.audit_signatures), which takes
libsodium's verify as its fast path: a good signature signs its transactions, and every
signature that does not hold is still INVALID, named at its own checkpoint, the first one
first, whatever the fast path says."""

import base64
from datetime import UTC, datetime

import orjson

from events.chain_link import read_link
from services.cli.audit_signatures import Located, SignatureProblem, check_checkpoints
from services.devtools.synthetic_log import transaction_records
from services.signing_keys import verify_keys


def _log(transactions: int) -> tuple[dict[tuple[str, str], list[Located]], list[bytes]]:
    start = datetime(2026, 12, 3, tzinfo=UTC)
    records = [r for i in range(transactions) for r in transaction_records(i, start, 2)]
    chains: dict[tuple[str, str], list[Located]] = {}
    for r in records:
        if r.role == "events":
            link = read_link(r.value)
            assert link is not None
            chains.setdefault((link.tenant, link.tx_id), []).append((link, "loc"))
    return chains, [r.value for r in records if r.role == "checkpoints"]


def _check(
    chains: dict[tuple[str, str], list[Located]], values: list[bytes]
) -> tuple[list[SignatureProblem], set[tuple[str, str]]]:
    located: list[tuple[bytes | None, str]] = [(v, f"checkpoint {n}") for n, v in enumerate(values)]
    return check_checkpoints(
        located, lambda t, tx: chains.get((t, tx)), verify_keys("dev"), lambda t, tx: True
    )


def _flipped(value: bytes) -> bytes:
    checkpoint = orjson.loads(value)
    raw = bytearray(base64.b64decode(checkpoint["signature"]))
    raw[5] ^= 1
    checkpoint["signature"] = base64.b64encode(bytes(raw)).decode("ascii")
    return orjson.dumps(checkpoint)


def test_every_checkpoint_signs_its_transaction() -> None:
    chains, values = _log(4)
    problems, signed = _check(chains, values)
    assert problems == []
    assert signed == set(chains)


def test_a_signature_that_does_not_hold_is_invalid_at_its_own_checkpoint() -> None:
    chains, values = _log(4)
    values[2], values[4] = _flipped(values[2]), _flipped(values[4])
    problems, _ = _check(chains, values)
    assert [(p.location, p.unverifiable) for p in problems] == [
        ("checkpoint 2", False),
        ("checkpoint 4", False),
    ]
    assert "signature does not hold" in problems[0].message
