"""The sandbox's stateful, destructive operations (domain.py) over HTTP: a promotion that
displaces and notifies another user, its preview computed from the same state, its undo,
an irreversible delete, and the revision check that refuses a stale view for good."""

from __future__ import annotations

import uuid
from typing import Any

import httpx


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def call(client: httpx.Client, path: str, key: str, payload: dict[str, Any]) -> httpx.Response:
    return client.post(path, json=payload, headers={"Idempotency-Key": key})


def test_promote_previews_displaces_notifies_and_restores(client: httpx.Client) -> None:
    wl = fresh("class")
    users = ["u1", "u2", "u3", "u4", "u5", "u6"]
    assert (
        client.post(
            "/v1/waitlists", json={"resource": wl, "users": users, "revision": 41}
        ).status_code
        == 201
    )
    payload = {"resource": wl, "user": "u6", "expected_revision": 41}

    preview = client.post("/v1/waitlist/promote/preview", json=payload)
    assert preview.status_code == 200, preview.text
    seen = preview.json()
    assert seen["current_revision"] == 41
    assert seen["effects"]["actor_position"] == {"from": 6, "to": 5}
    assert seen["effects"]["other_users_displaced"] == 1
    assert seen["effects"]["displaced"][0]["user"] == "u5"
    assert [n["to"] for n in seen["notifications"]] == ["u5"]
    assert seen["reversibility"] == "compensating_only"
    # A preview changes nothing.
    assert client.get(f"/v1/waitlists/{wl}").json()["users"] == users

    key = fresh("promote")
    applied = call(client, "/v1/waitlist/promote", key, payload)
    assert applied.status_code == 200, applied.text
    # The apply did exactly what the preview said.
    assert applied.json()["result"]["effects"] == seen["effects"]
    state = client.get(f"/v1/waitlists/{wl}").json()
    assert state["users"] == ["u1", "u2", "u3", "u4", "u6", "u5"]
    assert state["revision"] == 42
    assert [n["to"] for n in state["notifications"]] == ["u5"]

    # The old view is stale now: refused for good, at preview and at apply.
    stale = client.post("/v1/waitlist/promote/preview", json=payload)
    assert (stale.status_code, stale.json()["error"]) == (409, "stale_revision")
    again = call(client, "/v1/waitlist/promote", fresh("promote"), payload)
    assert (again.status_code, again.json()["error"]) == (409, "stale_revision")

    compensation = call(
        client, "/v1/waitlist/restore", fresh("restore"), {**payload, "reverses": {"op_key": key}}
    )
    assert compensation.status_code == 200, compensation.text
    state = client.get(f"/v1/waitlists/{wl}").json()
    assert state["users"] == users
    # Compensating only: the first notification stays sent, a second one says so.
    assert [n["to"] for n in state["notifications"]] == ["u5", "u6", "u5"]


def test_delete_is_applied_once_and_refused_when_stale_or_gone(client: httpx.Client) -> None:
    rec = fresh("rec")
    assert (
        client.post(
            "/v1/records", json={"resource": rec, "data": {"a": 1}, "revision": 3}
        ).status_code
        == 201
    )
    stale = call(
        client, "/v1/records/delete", fresh("del"), {"resource": rec, "expected_revision": 2}
    )
    assert (stale.status_code, stale.json()["error"]) == (409, "stale_revision")
    assert client.get(f"/v1/records/{rec}").json()["deleted"] is False
    key = fresh("del")
    assert (
        call(
            client, "/v1/records/delete", key, {"resource": rec, "expected_revision": 3}
        ).status_code
        == 200
    )
    assert client.get(f"/v1/records/{rec}").json()["deleted"] is True
    # The same key again: the original answer, nothing new.
    assert (
        call(
            client, "/v1/records/delete", key, {"resource": rec, "expected_revision": 3}
        ).status_code
        == 200
    )
    gone = call(client, "/v1/records/delete", fresh("del"), {"resource": rec})
    assert (gone.status_code, gone.json()["error"]) == (422, "record_not_found")
