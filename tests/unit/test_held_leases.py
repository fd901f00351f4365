"""The leases a process holds (services.dispatcher.held_leases): a call that ends while its
partition is owned releases nothing; a revocation releases, in one statement, the revoked
partitions' leases whose call is not on the wire; a call on the wire at the revocation
releases its own when it ends, by the time `ended` returns; a cancelled call's lease lapses;
a failed release is logged."""

import asyncio

from services.dispatcher.held_leases import HeldLeases, Release

A = ("demo", "k1", "forward", 1)
B = ("demo", "k2", "forward", 1)
C = ("demo", "k3", "undo", 1)


def _book(owned: set[int]) -> tuple[HeldLeases, list[list[Release]]]:
    runs: list[list[Release]] = []

    async def release(released: list[Release]) -> None:
        runs.append(released)

    return HeldLeases("me", lambda p: p in owned, release), runs


async def test_a_call_that_ends_on_an_owned_partition_releases_nothing_until_a_revocation() -> None:
    owned = {0, 1}
    book, runs = _book(owned)
    now = asyncio.get_running_loop().time()
    book.took(A, 0, now, 12.0)
    book.took(B, 0, now, 12.0)
    book.took(C, 1, now, 12.0)
    await book.ended(A)
    await book.ended(C)
    assert runs == []  # the normal path: no statement

    owned.discard(0)
    assert await book.let_go({0}) == 1
    # B is on the wire: not released; C is partition 1's, still owned.
    assert runs == [[(A, "me")]]
    await book.ended(B)  # B ends after its partition went: released before it reports
    assert runs[1:] == [[(B, "me")]]
    assert await book.let_go({0}) == 0  # nothing twice


async def test_a_lapsed_lease_or_a_cancelled_call_is_not_released() -> None:
    book, runs = _book(set())
    now = asyncio.get_running_loop().time()
    book.took(A, 0, now - 20.0, 12.0)  # its lease ended 8 s ago
    book.took(B, 0, now, 12.0)
    book.cancelled(B)  # a stop: its request may still be at the provider
    await book.ended(B)
    assert await book.let_go() == 0
    assert runs == []


async def test_a_failed_release_is_logged_and_never_raises() -> None:
    async def away(released: list[Release]) -> None:
        raise ConnectionError("Postgres away")

    book = HeldLeases("me", lambda p: False, away)
    book.took(A, 0, asyncio.get_running_loop().time(), 12.0)
    await book.ended(A)  # its partition is gone: released, which fails and is logged
    book.took(B, 0, asyncio.get_running_loop().time(), 12.0)
    assert await book.let_go() == 0
