"""The README's transaction against a running stack, as the checks that start one from images
(`make image-test`, `make compose-test`) use it: wait for the intake's /healthz, submit it,
and wait until the API reports it committed."""

from __future__ import annotations

import time

import httpx

from services.intake.example import example_transaction

HEADERS = {"Authorization": "Bearer demo-key"}


class NotCommitted(RuntimeError):
    pass


def commit_readme_transaction(url: str, timeout_s: float) -> None:
    """Raise NotCommitted, saying how far it got, unless order-42 commits within timeout_s."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=10) as http:
        while not _healthy(http, url):
            if time.monotonic() > deadline:
                raise NotCommitted(f"the intake at {url} was not healthy within {timeout_s:.0f} s")
            time.sleep(1)
        accepted = http.post(f"{url}/v1/transactions", json=example_transaction(), headers=HEADERS)
        if accepted.status_code != 202:
            raise NotCommitted(f"submission answered {accepted.status_code}: {accepted.text}")
        while True:
            tx = http.get(f"{url}/v1/transactions/order-42", headers=HEADERS).json()
            if tx.get("status") == "committed":
                return
            if time.monotonic() > deadline:
                raise NotCommitted(f"order-42 did not commit within {timeout_s:.0f} s: {tx}")
            time.sleep(0.5)


def _healthy(http: httpx.Client, url: str) -> bool:
    try:
        return http.get(f"{url}/healthz").status_code == 200
    except httpx.HTTPError:
        return False
