"""The Stripe adapter (the `stripe` entry point of services.providers.registry):
PaymentIntents create/confirm/cancel and Refunds over Stripe's form-encoded API.

`operations.py` says what each operation sends and which object states mean it took
effect, `forms.py` encodes a request the way Stripe reads it, `classify.py` (pure) says
what an answer means, `adapter.py` makes the calls. docs/providers.md, "Stripe".
"""
