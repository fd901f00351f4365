"""`audit verify`'s check of each checkpoint (services.cli.audit_signatures), which takes
libsodium's verify as its fast path and trusts a checkpoint that a later trusted one of its
partition names by hash without checking its signature: a good signature signs its
transactions, and every checkpoint whose bytes were altered (its heads, its signature, its
link) is still INVALID, named at its own checkpoint, the first one first, whatever the fast
path or the links say. Old logs without links and broken links cost signature checks, not
verdicts."""

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from support.checkpoint_edits import ALTERATIONS, edited, flip_signature, unlinked

from events.chain_link import read_link
from events.checkpoint import record_digest
from services.cli import audit_signatures
from services.cli.audit_signatures import Located, SignatureProblem, check_checkpoints
from services.devtools.synthetic_log import log_records, partition_of, transaction_records
from services.signing_keys import verify_keys

START = datetime(2026, 12, 3, tzinfo=UTC)
Log = tuple[dict[tuple[str, str], list[Located]], dict[int, list[bytes]]]


def _log(transactions: int, linked: bool = True, restart_at: int | None = None) -> Log:
    """The audit benchmark's log: its chains, and each partition's checkpoint records in
    log order, linked as one decider writes them (a new decider from transaction
    `restart_at` on), or as a decider from before links wrote them (`linked=False`)."""
    cut = transactions if restart_at is None else restart_at
    records = log_records(0, cut, START, 2) + log_records(cut, transactions, START, 2)
    chains: dict[tuple[str, str], list[Located]] = {}
    checkpoints: dict[int, list[bytes]] = {}
    for r in records:
        if r.role == "events":
            link = read_link(r.value)
            assert link is not None
            chains.setdefault((link.tenant, link.tx_id), []).append((link, "loc"))
        elif r.role == "checkpoints":
            value = r.value if linked else unlinked(r.value)
            checkpoints.setdefault(partition_of(r.key), []).append(value)
    return chains, checkpoints


def _signs(values: list[bytes]) -> set[tuple[str, str]]:
    """The transactions these (good) checkpoints sign."""
    return {(h["tenant"], h["tx_id"]) for v in values for h in orjson.loads(v)["heads"]}


def _check(
    log: Log, wanted: Any = lambda t, tx: True
) -> tuple[list[SignatureProblem], set[tuple[str, str]]]:
    chains, checkpoints = log
    partitions = [
        [(v, f"checkpoint {p}/{n}") for n, v in enumerate(checkpoints[p])]
        for p in sorted(checkpoints)
    ]
    return check_checkpoints(
        partitions, lambda t, tx: chains.get((t, tx)), verify_keys("dev"), wanted
    )


@pytest.fixture
def verifies(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many Ed25519 verifies the check made (the fast path sees every one)."""
    count = [0]
    real = audit_signatures._holds_fast

    def counting(checkpoint: dict[str, Any], keys: Any) -> bool:
        count[0] += 1
        return real(checkpoint, keys)

    monkeypatch.setattr(audit_signatures, "_holds_fast", counting)
    yield count


def test_every_checkpoint_signs_its_transaction_with_one_verify_per_partition(
    verifies: list[int],
) -> None:
    chains, checkpoints = log = _log(40)
    assert all(len(values) >= 3 for values in checkpoints.values()), checkpoints
    problems, signed = _check(log)
    assert problems == []
    assert signed == set(chains)
    # Only each partition's last checkpoint was checked by its signature.
    assert verifies[0] == len(checkpoints)


def test_an_earlier_checkpoint_altered_in_any_byte_is_invalid_at_its_own_place(
    verifies: list[int],
) -> None:
    _, checkpoints = log = _log(40)
    p = min(checkpoints)
    values = checkpoints[p]
    # Its head (as a rewritten chain's forger would), its signature, and its link: each
    # followed by intact linked checkpoints, whose signatures hold.
    altered = (1, 3, 5)
    for n, change in zip(altered, ALTERATIONS, strict=True):
        values[n] = edited(values[n], change)
    problems, signed = _check(log)
    assert [(p_.location, p_.unverifiable) for p_ in problems] == [
        (f"checkpoint {p}/1", False),
        (f"checkpoint {p}/3", False),
        (f"checkpoint {p}/5", False),
    ], problems
    assert all("signature does not hold" in p_.message for p_ in problems), problems
    # The altered ones sign nothing; every other checkpoint's transactions are signed.
    good = [
        v for q in checkpoints for n, v in enumerate(checkpoints[q]) if q != p or n not in altered
    ]
    assert signed == _signs(good)


def test_a_log_of_checkpoints_without_links_checks_each_signature(verifies: list[int]) -> None:
    chains, checkpoints = log = _log(12, linked=False)
    problems, signed = _check(log)
    assert problems == [] and signed == set(chains)
    assert verifies[0] == sum(len(values) for values in checkpoints.values())


def test_a_broken_chain_of_links_falls_back_to_signatures(verifies: list[int]) -> None:
    # A new decider from transaction 30 on: its first checkpoint of each partition names
    # nothing, so the last one of the old decider is checked by its signature.
    _, checkpoints = log = _log(60, restart_at=30)
    p = min(checkpoints)
    values = checkpoints[p]
    old = log_records(0, 30, START, 2)
    first_run = sum(1 for r in old if r.role == "checkpoints" and partition_of(r.key) == p)
    assert first_run > 8 and len(values) - first_run > 2, (first_run, len(values))
    # A checkpoint gone (an aborted transaction's, say: the next one names a record that
    # is not on the log) and junk in the middle of the old decider's run.
    del values[2]
    values.insert(5, b"{junk")
    problems, signed = _check(log)
    assert [p_.message.startswith("not a checkpoint") for p_ in problems] == [True]
    good = [v for q in checkpoints for v in checkpoints[q] if v != b"{junk"]
    assert signed == _signs(good)
    # Each partition's last and the old decider's last, plus those no trusted successor
    # names: the one before the gone one and the one before the junk.
    assert verifies[0] == 2 * len(checkpoints) + 2


def test_a_wanted_checkpoint_is_trusted_through_unwanted_later_ones(verifies: list[int]) -> None:
    chains, checkpoints = log = _log(40)
    [first] = [k for k in chains if k[1] == "bench-00000000"]
    problems, signed = _check(log, lambda t, tx: (t, tx) == first)
    assert problems == [] and signed == {first}
    assert verifies[0] == len(checkpoints)  # each partition's last one only
    values = checkpoints[partition_of(f"{first[0]}/{first[1]}".encode())]
    values[0] = edited(values[0], flip_signature)
    problems, signed = _check(log, lambda t, tx: (t, tx) == first)
    assert [p.message for p in problems] == [
        f"the signature does not hold under key {orjson.loads(values[0])['key_id']}"
    ]


def test_each_transaction_s_records_alone_link_its_own_checkpoints() -> None:
    # transaction_records without a chain: a committed transaction with a late webhook
    # writes two checkpoints, the second naming the first.
    values = [r.value for r in transaction_records(0, START, 2) if r.role == "checkpoints"]
    assert len(values) == 2
    assert "prev_checkpoint" not in orjson.loads(values[0])
    assert orjson.loads(values[1])["prev_checkpoint"] == record_digest(values[0])
