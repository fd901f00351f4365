"""The catalog comes from the providers (issue 20, item 2): events/catalog.py holds the
vocabulary and no operation; the configured adapters declare theirs; the door judges by
them; the decider reads what the events recorded at submission, never the configuration of
the day; and the OpenAPI document lists the deployment's catalog and webhook headers."""

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
from support.catalogs import SANDBOX
from support.txbuilders import compensate, observed, plan, submit

import events.catalog as catalog_module
from events.catalog import (
    UNDECLARED,
    Catalog,
    OperationFacts,
    OperationInfo,
    Reversibility,
    SideEffect,
)
from events.definition import Leg, OperationKind, OperationSpec
from events.inputs import Outcome
from events.legacy_facts import LEGACY_FACTS
from events.transaction_events import OperationDispatched
from reconcilers.signatures import Scheme
from services.config import Settings, load_settings
from services.intake.app import create_app
from services.intake.submission import (
    SubmissionRefused,
    SubmissionRequest,
    check,
    operation_specs,
)
from services.providers.registry import _operations_problem, catalog_of
from services.providers.sandbox_operations import SANDBOX_OPERATIONS
from services.providers.stripe.operations import DECLARED as STRIPE_OPERATIONS
from transactions.side_effects import leg_info
from transactions.transaction import handle, initial_state


def settings_with_stripe() -> Settings:
    return dataclasses.replace(
        load_settings(),
        providers={"sandbox": "http://127.0.0.1:9", "pay": "http://127.0.0.1:10"},
        provider_adapters={"pay": "stripe"},
        webhook_secrets={"sandbox": ("whsec_a",), "pay": ("whsec_b",)},
        webhook_schemes={"pay": Scheme.STRIPE},
    )


def submission(provider: str, operation: str, payload: dict[str, Any]) -> SubmissionRequest:
    step = {"action": "a", "provider": provider, "operation": operation, "payload": payload}
    return SubmissionRequest.model_validate({"tx_id": "t", "agent_id": "x", "steps": [step]})


def refusal(catalog: Catalog, provider: str, operation: str, payload: dict[str, Any]) -> str:
    with pytest.raises(SubmissionRefused) as refused:
        check(submission(provider, operation, payload), catalog)
    return f"{refused.value.code}: {refused.value.message}"


def _declares(value: Mapping[Any, Any]) -> bool:
    return any(isinstance(v, OperationInfo) for v in value.values())


def test_events_catalog_names_no_operation() -> None:
    declared = [
        name
        for name, value in vars(catalog_module).items()
        if isinstance(value, OperationInfo)
        or (
            isinstance(value, Mapping) and any(isinstance(v, OperationInfo) for v in value.values())
        )
    ]
    assert declared == []
    assert "payments." not in open(catalog_module.__file__).read()


def test_the_catalog_is_what_each_configured_providers_adapter_declares() -> None:
    catalog = catalog_of(settings_with_stripe())
    assert catalog.providers() == ("pay", "sandbox")
    assert dict(catalog.operations("sandbox")) == SANDBOX_OPERATIONS
    assert dict(catalog.operations("pay")) == STRIPE_OPERATIONS
    assert catalog.operations("nobody") == {}
    assert catalog.compensation_of("pay", "payment_intents.create") == "payment_intents.cancel"
    assert catalog.facts("pay", "payments.charge") == UNDECLARED  # not the sandbox's word
    assert set(catalog.names()) == set(SANDBOX_OPERATIONS) | set(STRIPE_OPERATIONS)


def test_the_door_refuses_an_unknown_provider_operation_or_payload_naming_it() -> None:
    catalog = catalog_of(settings_with_stripe())
    assert refusal(catalog, "nobody", "payments.charge", {"amount": 1}).startswith(
        "unknown_provider: action 'a': unknown provider 'nobody'; known providers: pay, sandbox"
    )
    # A Stripe operation is not the sandbox's, nor the sandbox's Stripe's.
    wrong = refusal(catalog, "sandbox", "payment_intents.create", {"amount": 1})
    assert wrong.startswith("unknown_operation: action 'a': provider 'sandbox' has no operation")
    assert "payments.charge" in wrong
    assert refusal(catalog, "pay", "payments.charge", {"amount": 1}).startswith("unknown_operation")
    # Each provider's own schema judges its payloads.
    assert refusal(catalog, "pay", "payment_intents.create", {"amount": 5}) == (
        "invalid_payload: action 'a' (payment_intents.create): payload.currency: required"
    )
    assert "payload.amount" in refusal(
        catalog, "pay", "payment_intents.create", {"amount": "5", "currency": "usd"}
    )
    check(submission("pay", "payment_intents.create", {"amount": 5, "currency": "usd"}), catalog)


def test_the_facts_the_decider_reads_are_recorded_at_submission() -> None:
    body = SubmissionRequest.model_validate(
        {
            "tx_id": "t",
            "agent_id": "x",
            "steps": [
                {
                    "action": "charge",
                    "provider": "sandbox",
                    "operation": "payments.charge",
                    "payload": {"amount": 1},
                    "compensation": {"operation": "payments.refund"},
                }
            ],
        }
    )
    (spec,) = operation_specs(body, tenant="demo", environment="dev", catalog=SANDBOX)
    assert spec.facts == OperationFacts(
        side_effect=SideEffect.WRITE, reversibility=Reversibility.COMPENSATING_ONLY
    )
    assert spec.compensation is not None and spec.compensation.facts == OperationFacts(
        side_effect=SideEffect.WRITE, reversibility=Reversibility.IRREVERSIBLE
    )
    dumped = spec.model_dump(mode="json")
    assert dumped["facts"] == {"side_effect": "write", "reversibility": "compensating_only"}


def spec(operation: str, facts: OperationFacts | None) -> OperationSpec:
    return OperationSpec(
        action="a",
        kind=OperationKind.STEP,
        provider="anything",
        operation=operation,
        payload={},
        op_key="k",
        facts=facts,
    )


def test_the_decider_reads_recorded_facts_and_old_events_through_the_frozen_table() -> None:
    # A provider's declaration recorded on the step is what the decider reads, whatever
    # the name: a `read` called payments.charge is a read for that transaction.
    read = OperationFacts(side_effect=SideEffect.READ, reversibility=Reversibility.REVERSIBLE)
    assert leg_info(spec("payments.charge", read), Leg.FORWARD) == read
    # An event from before facts were recorded: the table the decider read then.
    assert leg_info(spec("waitlist.promote", None), Leg.FORWARD).side_effect is (
        SideEffect.DESTRUCTIVE
    )
    assert leg_info(spec("payment_intents.create", None), Leg.FORWARD) == UNDECLARED
    # The frozen table is the sandbox's declaration as it was: they must not drift apart
    # while the sandbox keeps these operations (a change to the sandbox is a new fact).
    assert {name: info.facts for name, info in SANDBOX_OPERATIONS.items()} == LEGACY_FACTS


def test_an_old_step_without_facts_serialises_as_it_did() -> None:
    old = spec("payments.charge", None).model_dump(mode="json")
    assert "facts" not in old
    assert OperationSpec.model_validate(old).facts is None


@pytest.mark.parametrize(
    ("operations", "problem"),
    [
        ([], "must map each operation"),
        ({"a.b": OperationInfo("a.c", SideEffect.WRITE, Reversibility.REVERSIBLE)}, "named"),
        (
            {"a.b": OperationInfo("a.b", SideEffect.WRITE, Reversibility.REVERSIBLE, "a.z")},
            "does not offer",
        ),
        (
            {
                "a.b": OperationInfo(
                    "a.b",
                    SideEffect.WRITE,
                    Reversibility.REVERSIBLE,
                    payload_schema={"type": "objekt"},
                )
            },
            "not a JSON Schema",
        ),
    ],
)
def test_a_broken_declaration_stops_start_up(operations: object, problem: str) -> None:
    assert problem in (_operations_problem(operations) or "")
    assert _operations_problem(SANDBOX_OPERATIONS) is None
    assert _operations_problem(STRIPE_OPERATIONS) is None


def test_the_openapi_document_lists_the_catalog_and_each_providers_signature_headers() -> None:
    document = create_app(settings_with_stripe()).openapi()
    schemas = document["components"]["schemas"]
    step = schemas["OperationRequest"]["properties"]
    assert step["provider"]["enum"] == ["pay", "sandbox"]
    assert "payment_intents.create" in step["operation"]["enum"]
    assert "payments.charge" in step["operation"]["enum"]
    assert schemas["CompensationRequest"]["properties"]["operation"]["enum"] == [
        "inventory.release",
        "payment_intents.cancel",
        "payments.refund",
        "refunds.create",
        "waitlist.restore",
    ]

    def required_headers(path: str) -> set[str]:
        parameters = document["paths"][path]["post"]["parameters"]
        return {p["name"] for p in parameters if p["in"] == "header" and p["required"]}

    assert required_headers("/v1/webhooks/pay") == {"Stripe-Signature"}
    assert required_headers("/v1/webhooks/sandbox") == {
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }
    (provider,) = [
        p
        for p in document["paths"]["/v1/webhooks/{provider}"]["post"]["parameters"]
        if p["name"] == "provider"
    ]
    assert provider["schema"]["enum"] == ["pay", "sandbox"]


def test_a_declared_undo_payload_is_built_from_the_confirmed_step_and_recorded() -> None:
    # Given a Stripe payment intent made, then a declined charge, when the saga undoes the
    # intent, then the cancel names the intent by its id (the create's evidence), not the
    # create's amount and currency with `reverses`, which Stripe cannot act on.
    catalog = catalog_of(settings_with_stripe())
    body = SubmissionRequest.model_validate(
        {
            "tx_id": "tx-1",
            "agent_id": "x",
            "steps": [
                {
                    "action": "reserve",
                    "provider": "pay",
                    "operation": "payment_intents.create",
                    "payload": {"amount": 100, "currency": "usd"},
                    "compensation": {"operation": "payment_intents.cancel"},
                },
                {
                    "action": "charge",
                    "provider": "sandbox",
                    "operation": "payments.charge",
                    "payload": {"amount": 100},
                },
            ],
        }
    )
    specs = operation_specs(body, tenant="demo", environment="dev", catalog=catalog)
    assert specs[0].compensation is not None
    assert specs[0].compensation.template == {"payment_intent": "$remote_id"}
    built = submit(["reserve", "charge"])
    # The recorded step, under the builder's key (the one `observed` answers for).
    first = specs[0].model_copy(update={"op_key": built.operations[0].op_key})
    accepted = built.model_copy(update={"operations": (first, *built.operations[1:])})
    state = initial_state("demo", "tx-1")
    undone: list[dict[str, Any]] = []
    for message in (
        accepted,
        observed("reserve", 1, Outcome.SUCCEEDED),
        observed("charge", 1, Outcome.REJECTED),
        plan("reserve"),
        compensate("reserve"),
    ):
        state, envelopes = handle(state, message)
        undone += [
            e.payload
            for e in (envelope.event() for envelope in envelopes)
            if isinstance(e, OperationDispatched) and e.leg is Leg.COMPENSATION
        ]
    assert undone == [{"payment_intent": "ch_reserve"}]  # observed()'s remote id
