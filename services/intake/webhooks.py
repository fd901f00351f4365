"""Webhook ingress: `POST /v1/webhooks/{provider}` (docs/contract.md, "Webhooks").

No API key: the provider signs each delivery instead, with the secret of the account it
belongs to: the shared account's at `/v1/webhooks/{provider}`, a tenant's own account's at
`/v1/webhooks/{provider}/accounts/{tenant}`. A delivery proves only what its account holds
(reconcilers.webhook_intake.meaning). The order of the steps is the point:

1. verify the signature on the raw body, before anything in it is believed;
2. drop a delivery id already handled within the dedupe horizon (`webhook_deliveries`,
   in Postgres, so a restart does not reopen the window; services.intake.webhook_store);
3. read it with the signing account's adapter (ProviderAdapter.read_webhook: the
   provider's own event format), turn the effect into an observation of the operation it
   belongs to, or into drift when it belongs to none, and wait for Kafka's
   acknowledgement (an event the adapter does not act on is only remembered);
4. only then answer 2xx (promise 7), and record the delivery id: with the next webhook's
   check, or within services.intake.delivery_batches.RECORD_BOUND_S, this intake answering
   its retries `duplicate` meanwhile. A crash before the record is written (or between 3
   and 4) makes the provider's retry handled again; the second observation carries the
   same message id, which a live transaction takes once; a finished one keeps no input
   ids and records it as one more ObservationIgnored, never an effect
   (transactions.finished; tests/fault/test_drift_claim_crash.py).

Drift is produced in 3 only by the delivery that claims its id (reconcilers.store.
claiming_reports, the one judge of "already reported", the drift scan's too), and the id is
remembered as reported, before 4: a webhook that arrives after the scan reported its stray
(late, retried past the dedupe horizon, replayed) or while the scan is reporting it reports
nothing again, and is recorded and answered as any other.

One statement per delivery at most (issue 24, item 5), and two more for a delivery that
reports drift (its claim and the claim's idle bound, rare): the body is read (3, pure)
before 2, so that the dedupe check, the lookup of the effect's operation and the records of
the deliveries answered before it are one statement (webhook_store.DELIVERIES); nothing
read is acted on before the check, and an unreadable body that was handled already is
still answered `duplicate`. The statement is shared by the webhooks that reach it at the
same time (services.intake.delivery_batches), so under load a delivery costs less than one.
"""

import base64
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from events.inputs import OperationObserved, SignedDelivery
from events.keys import partition_key
from reconcilers.signatures import (
    Scheme,
    SignatureError,
    SignatureErrorCode,
    signed_headers,
    verify,
)
from reconcilers.webhook_intake import meaning
from reconcilers.webhook_reading import WebhookBodyError, WebhookReading, read_effect_webhook
from services.config import Settings
from services.crash_points import (
    DRIFT_PRODUCED_CLAIM_OPEN,
    INTAKE_DRIFT_CLAIMED_UNRECORDED,
    crash_point,
)
from services.intake import webhook_store
from services.intake.delivery_batches import DeliveryBatches
from services.intake.errors import ApiError
from services.intake.openapi import WEBHOOK_EXTRA, ProviderName, TenantName, errors, ok
from services.intake.produce import produce_acked
from services.intake.response_models import WebhookAcknowledged
from services.metrics import WEBHOOK_VERIFICATIONS, labelled
from services.providers.accounts import Account
from services.providers.registry import Accounts

log = logging.getLogger(__name__)

router = APIRouter()


@router.post(
    "/v1/webhooks/{provider}",
    responses={**ok(WebhookAcknowledged), **errors(400, 401, 404, 413, 422, 503)},
    openapi_extra=WEBHOOK_EXTRA,
)
async def receive(provider: ProviderName, request: Request) -> Response:
    """A delivery to the provider's shared account."""
    settings: Settings = request.app.state.settings
    secrets = settings.webhook_secrets.get(provider)
    if not secrets:
        raise ApiError(
            404,
            "unknown_provider",
            f"no webhook secret is configured for provider {provider!r}; "
            "set it in RECON_WEBHOOK_SECRETS",
        )
    return await _receive(request, Account(provider), secrets)


@router.post(
    "/v1/webhooks/{provider}/accounts/{tenant}",
    responses={**ok(WebhookAcknowledged), **errors(400, 401, 404, 413, 422, 503)},
    openapi_extra=WEBHOOK_EXTRA,
)
async def receive_own(provider: ProviderName, tenant: TenantName, request: Request) -> Response:
    """A delivery to a tenant's own account at the provider (RECON_PROVIDER_ACCOUNTS),
    signed with that account's secret: the path only picks the secret to check, the
    signature is what proves the account."""
    settings: Settings = request.app.state.settings
    own = settings.provider_accounts.get((tenant, provider))
    if own is None or not own.webhook_secrets:
        raise ApiError(
            404,
            "unknown_account",
            f"no webhook secret is configured for tenant {tenant!r}'s own account at "
            f"provider {provider!r}; set `{tenant}/{provider}=...` in RECON_WEBHOOK_SECRETS",
        )
    return await _receive(request, Account(provider, tenant), own.webhook_secrets)


# The constant answers, rendered once: JSONResponse's json.dumps of them cost more than the
# rest of making the response. The bytes are the ones it renders.
DUPLICATE = b'{"status":"duplicate"}'
ACCEPTED = b'{"status":"accepted"}'


def _answered(body: bytes) -> Response:
    return Response(body, media_type=JSONResponse.media_type)


async def _receive(request: Request, account: Account, secrets: tuple[str, ...]) -> Response:
    settings: Settings = request.app.state.settings
    provider = account.provider
    body = await request.body()
    # Read once for the signature and for the evidence.
    headers = dict(request.headers.items())
    scheme = settings.webhook_schemes.get(provider, Scheme.STANDARD)
    now = datetime.now(UTC)
    try:
        verified = verify(
            scheme,
            headers,
            body,
            secrets,
            now=int(now.timestamp()),
            tolerance_s=settings.webhook_tolerance_s,
        )
    except SignatureError as exc:
        labelled(WEBHOOK_VERIFICATIONS, provider, exc.code.value).inc()
        # 401 when the signature itself is wrong; 400 when the delivery is malformed or
        # stale. Either way nothing was recorded.
        status = 401 if exc.code is SignatureErrorCode.BAD_SIGNATURE else 400
        raise ApiError(status, exc.code.value, exc.message) from None
    labelled(WEBHOOK_VERIFICATIONS, provider, "verified").inc()
    delivery_id = verified.delivery_id
    horizon = timedelta(seconds=settings.webhook_dedupe_horizon_s)
    unreadable = ""
    try:
        reading: WebhookReading | None = _reader(request, account)(body)
    except WebhookBodyError as exc:
        reading, unreadable = None, str(exc)
    notice = reading.notice if reading is not None else None
    batches: DeliveryBatches = request.app.state.delivery_batches
    known = await batches.look_up(
        webhook_store.Asked(
            account=str(account),
            delivery_id=delivery_id,
            since=now - horizon,
            provider=provider,
            keys=notice.keys if notice is not None else (),
        )
    )
    if known.seen:
        return _answered(DUPLICATE)
    if reading is None:
        raise ApiError(400, "invalid_webhook", f"{unreadable}; nothing was recorded")
    if notice is None:
        # An event the provider's adapter does not act on: remembered, so its retries
        # are duplicates, and acknowledged so the provider stops retrying.
        batches.remember(str(account), delivery_id, now)
        return JSONResponse({"status": "ignored", "type": reading.type})
    matched = known.matched
    producer = request.app.state.producer
    # The delivery as received goes with its observation into the transaction's evidence
    # (audit bundle): recon's word that it verified a signature is not the signature.
    delivery = SignedDelivery(
        scheme=scheme.value,
        headers=signed_headers(scheme, headers),
        body_base64=base64.b64encode(body).decode("ascii"),
    )
    found = meaning(provider, account.tenant, delivery_id, notice, matched, now, delivery)
    if isinstance(found, OperationObserved):
        await produce_acked(
            producer,
            settings.topics.observations,
            partition_key(found.tenant, found.tx_id),
            found.model_dump_json().encode(),
            f"the webhook observation {found.message_id}",
        )
    else:
        # Claimed, produced, and remembered as reported before the delivery is (a crash
        # in between: the provider's retry finds it reported and produces nothing), by
        # the drift scan's own claim: a webhook that arrives after the scan reported its
        # stray (late, retried past the dedupe horizon, replayed), or while the scan is
        # reporting it, produces it no second time.
        async with batches.reporting(found.drift_id, found.kind.value, now) as claimed:
            if claimed:
                log.warning(
                    "webhook %s/%s: effect %s is %s; reporting drift %s",
                    account,
                    delivery_id,
                    notice.effect_id,
                    found.kind.value,
                    found.drift_id,
                )
                await produce_acked(
                    producer,
                    settings.topics.drift,
                    found.drift_id.encode(),
                    found.model_dump_json().encode(),
                    f"the drift report {found.drift_id}",
                )
                crash_point(DRIFT_PRODUCED_CLAIM_OPEN)
        crash_point(INTAKE_DRIFT_CLAIMED_UNRECORDED)
        if not claimed:
            log.info(
                "webhook %s/%s: effect %s is %s; drift %s was reported already",
                account,
                delivery_id,
                notice.effect_id,
                found.kind.value,
                found.drift_id,
            )
    batches.remember(str(account), delivery_id, now)
    return _answered(ACCEPTED)


def _reader(request: Request, account: Account) -> Callable[[bytes], WebhookReading]:
    """The signing account's adapter reads the delivery (ProviderAdapter.read_webhook); a
    provider with webhook secrets and no adapter configured sends recon's own format,
    the sandbox's (services.providers.registry.DEFAULT_ADAPTER)."""
    readers: Accounts = request.app.state.webhook_readers
    adapter = readers.adapters.get(account)
    return adapter.read_webhook if adapter is not None else read_effect_webhook
