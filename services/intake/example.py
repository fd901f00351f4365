"""The transaction of docs/contract.md: reserve stock, charge the card, then email a receipt.

One definition for the OpenAPI document's example, the curl line `make run` prints, the
benchmark and the tests, so what people are shown to try is what is measured and tested.
"""

import json
from typing import Any


def example_transaction(
    tx_id: str = "order-42", *, customer: str = "cus_1", sku: str = "sku-1", receipt: bool = True
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "tx_id": tx_id,
        "agent_id": "agent-7",
        "steps": [
            {
                "action": "reserve",
                "provider": "sandbox",
                "operation": "inventory.reserve",
                "payload": {"sku": sku, "qty": 1},
                "compensation": {"operation": "inventory.release"},
            },
            {
                "action": "charge",
                "provider": "sandbox",
                "operation": "payments.charge",
                "payload": {"amount": 1299, "currency": "usd", "customer": customer},
                "compensation": {"operation": "payments.refund"},
            },
        ],
    }
    if receipt:
        body["on_commit"] = [
            {
                "action": "receipt",
                "provider": "sandbox",
                "operation": "email.send",
                "payload": {"to": "a@example.com", "template": "receipt"},
            }
        ]
    return body


def example_curl(intake_url: str, api_key: str = "demo-key") -> str:
    """The two requests a person can paste: submit the example, then read it back."""
    auth = f"-H 'Authorization: Bearer {api_key}'"
    body = json.dumps(example_transaction())
    return (
        f"curl -s -X POST {intake_url}/v1/transactions {auth} \\\n"
        f"  -H 'Content-Type: application/json' -d '{body}'\n"
        f"curl -s {intake_url}/v1/transactions/order-42 {auth}"
    )
