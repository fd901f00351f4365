"""Frozen vectors: changing these outputs would give in-flight operations new keys."""

from events.canonical import canonical_json, fingerprint
from events.keys import compensation_key, op_key


def test_op_key_vector() -> None:
    key = op_key(
        tenant="demo", environment="dev", provider="sandbox", tx_id="order-42", action="charge"
    )
    assert key == "rk1_205fe8b494c1e29e52f2dca42cddcef2a9daae98"


def test_compensation_key_vector() -> None:
    assert compensation_key("rk1_0123") == "rc1_f48425b7ed9707ad1a5f1cb6a6e80d7de8596f84"


def test_op_key_depends_on_every_coordinate() -> None:
    base = {
        "tenant": "demo",
        "environment": "dev",
        "provider": "sandbox",
        "tx_id": "t",
        "action": "a",
    }
    keys = {op_key(**base)} | {op_key(**{**base, k: v + "x"}) for k, v in base.items()}  # type: ignore[arg-type]
    assert len(keys) == len(base) + 1


def test_canonical_json_ignores_key_order_and_spacing() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": "é", "c": None}]}) == (
        '{"a":[1,{"c":null,"d":"é"}],"b":1}'.encode()
    )
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": "1"})
