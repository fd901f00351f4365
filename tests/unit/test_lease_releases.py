"""Releases of calls' leases are gathered into one statement per window
(services.dispatcher.lease_releases), never make the ended call wait, and a failed
statement loses only releases (their leases lapse), never raises into a call."""

import asyncio

from services.dispatcher.lease_releases import RELEASE_WINDOW_S, LeaseReleases, Release

ROW = ("demo", "k1", "forward", 1)


async def test_releases_of_one_window_are_one_statement_and_later_ones_another() -> None:
    runs: list[list[Release]] = []

    async def run(released: list[Release]) -> None:
        runs.append(released)

    releases = LeaseReleases(run)
    releases.add(ROW, "a")
    releases.add((*ROW[:3], 2), "b")
    assert runs == []  # the calls that ended did not wait
    await asyncio.sleep(RELEASE_WINDOW_S * 3)
    assert runs == [[(ROW, "a"), ((*ROW[:3], 2), "b")]]
    releases.add(ROW, "c")
    await asyncio.sleep(RELEASE_WINDOW_S * 3)
    assert runs[1:] == [[(ROW, "c")]]


async def test_a_failed_release_is_logged_and_a_stop_releases_what_is_pending() -> None:
    runs: list[list[Release]] = []

    async def run(released: list[Release]) -> None:
        runs.append(released)
        if len(runs) == 1:
            raise ConnectionError("Postgres away")

    releases = LeaseReleases(run)
    releases.add(ROW, "a")
    await asyncio.sleep(RELEASE_WINDOW_S * 3)  # failed: logged, that lease lapses
    releases.add(ROW, "b")
    await releases.close()  # before its window ended
    assert runs == [[(ROW, "a")], [(ROW, "b")]]
