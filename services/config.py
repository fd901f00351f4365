"""Settings from the environment, checked once at start-up.

Every recon process reads the same variables, so one environment describes a whole
deployment; a bad value stops the process before it touches Kafka or Postgres.
"""

import math
import os
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from events.topics import PARTITIONS, Topics
from reconcilers.signatures import InvalidSecretError, Scheme, key_for
from services import kafka_security

if TYPE_CHECKING:
    from services.providers.declared.model import ProviderFile

# CONTRACT.md: the secret the `sandbox` provider signs with out of the box.
DEFAULT_WEBHOOK_SECRET = "whsec_c2FuZGJveC1kZXYtc2VjcmV0"
# Providers retry deliveries for days (Stripe: 3 days); a shorter dedupe window would let
# a late redelivery count as new.
MIN_DEDUPE_HORIZON_S = 3 * 24 * 3600
# Request body caps (services.intake.body_limit). A submission becomes one Kafka record,
# which the broker takes up to 1 MiB: the cap keeps every accepted body producible.
MAX_BODY_BYTES = 256 * 1024
MAX_BODY_BYTES_CEILING = 512 * 1024
WEBHOOK_MAX_BODY_BYTES = 64 * 1024
# How long an intent (or a review resolution) whose command Kafka never acknowledged
# blocks a different body (services.intake.intents); it must outlast the intake
# producer's delivery bound (services.intake.produce.DELIVERY_BOUND_S, 30 s), with room
# for the decider and the projector to show a command that did land.
PENDING_HORIZON_S = 120.0
MIN_PENDING_HORIZON_S = 60.0


# Every variable's default, written once: load_settings reads the environment with these,
# the dataclasses below take their defaults from here, and the README's "Configuration"
# table is checked against them (tests/unit/test_config_defaults.py).
DEFAULTS: dict[str, str] = {
    "RECON_KAFKA_BOOTSTRAP": "127.0.0.1:9092",
    "RECON_KAFKA_PARTITIONS": str(PARTITIONS),
    "RECON_KAFKA_REPLICATION_FACTOR": "1",
    "RECON_KAFKA_MIN_INSYNC_REPLICAS": "1",
    "RECON_DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/postgres",
    "RECON_API_KEYS": "demo-key=demo",
    "RECON_OPERATOR_KEYS": "ops-key=demo:operator",
    "RECON_ADMIN_KEYS": "",
    "RECON_TENANT_RESOURCES": "demo=*",
    "RECON_PROVIDERS": "sandbox=http://127.0.0.1:8090",
    "RECON_PROVIDER_ADAPTERS": "",
    "RECON_PROVIDER_SECRETS": "",
    "RECON_PROVIDER_ACCOUNTS": "",
    "RECON_PROVIDER_FILES": "",
    "RECON_ENVIRONMENT": "dev",
    "RECON_APPROVAL_REQUIRED": "destructive",
    "RECON_TOPIC_PREFIX": "",
    "RECON_INTAKE_HOST": "127.0.0.1",
    "RECON_INTAKE_PORT": "8080",
    "RECON_PROVIDER_TIMEOUT_S": "5",
    "RECON_RECONCILE_INTERVAL_S": "2",
    "RECON_RECONCILE_AFTER_S": "10",
    "RECON_RECONCILE_BUDGET": "6",
    "RECON_RECONCILE_BACKOFF_S": "1",
    "RECON_RECONCILE_BACKOFF_MAX_S": "30",
    "RECON_RECONCILE_REVIEW_RETRY_S": "60",
    "RECON_DRIFT_INTERVAL_S": "60",
    "RECON_DRIFT_WINDOW_S": "86400",
    "RECON_DRIFT_GRACE_S": "60",
    # Every Nth scheduled drift scan judges each account's whole window, cursors aside
    # (reconcilers.drift_span.backstop_due): hourly at the default interval.
    "RECON_DRIFT_BACKSTOP_EVERY": "60",
    # provider=pages: the drift listing's page cap of a built-in adapter's provider
    # (services.providers.adapters, .stripe), empty: each adapter's own.
    "RECON_DRIFT_LIST_PAGES": "",
    "RECON_RECONCILER_RETENTION_S": str(7 * 86400),
    "RECON_PURGE_INTERVAL_S": "3600",
    "RECON_LOG_LEVEL": "INFO",
    "RECON_LOG_FORMAT": "json",
    "RECON_TRACE_EXPORTER": "none",
    "RECON_EVENT_LOOP": "uvloop",
    "RECON_WEBHOOK_SECRETS": f"sandbox={DEFAULT_WEBHOOK_SECRET}",
    "RECON_WEBHOOK_SCHEMES": "sandbox=standard",
    "RECON_WEBHOOK_TOLERANCE_S": "300",
    "RECON_WEBHOOK_DEDUPE_HORIZON_S": str(MIN_DEDUPE_HORIZON_S),
    "RECON_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
    "RECON_WEBHOOK_MAX_BODY_BYTES": str(WEBHOOK_MAX_BODY_BYTES),
    "RECON_PENDING_HORIZON_S": f"{PENDING_HORIZON_S:g}",
    "RECON_KAFKA_INTENT_TENANTS": "",
    "RECON_METRICS_PORT": "",
    "RECON_METRICS_HOST": "127.0.0.1",
    "RECON_OWNER_LEASE_S": "300",
    # A projector that has not polled its partitions for this long exits to be restarted
    # (services.projector.stall_watch).
    "RECON_PROJECTOR_STALL_S": "90",
    # Signs owner tokens (services.intake.owner_token); set your own outside development.
    "RECON_OWNER_TOKEN_SECRET": "recon-dev-owner-token-secret",
    "RECON_POLICY_FILE": "",
    # TLS and SASL towards Kafka (services.kafka_security).
    **kafka_security.DEFAULTS,
    # Signed checkpoints (services.signing_keys, docs/receipts.md): the decider's Ed25519
    # key, required outside development; the public keys auditors verify with.
    "RECON_SIGNING_KEY": "",
    "RECON_SIGNING_KEY_FILE": "",
    "RECON_VERIFY_KEYS_FILE": "",
    "RECON_CHECKPOINT_INTERVAL_S": "1",
    # Receipts (GET /v1/transactions/{tx_id}/receipt) one intake builds at once; past it 503.
    "RECON_RECEIPT_CONCURRENCY": "2",
    # How long the decider may hold decisions that only record evidence for the partition's
    # next Kafka transaction when idle (longer under load; services.decider.group_commit).
    "RECON_DECIDER_GROUP_COMMIT_MS": "100",
    "RECON_DECIDER_CALLS": "on",
    # How long the projector lets records gather after a large fetch (never after a small
    # one; services.reader_batching).
    "RECON_READER_BATCH_WAIT_MS": "50",
    # The same for the saga orchestrator, which acts on failures alone (services.
    # reader_batching: why longer).
    "RECON_SAGA_BATCH_WAIT_MS": "250",
}


def _env(name: str) -> str:
    return os.environ.get(name, DEFAULTS[name])


# Variables whose value may come from a file instead (`<name>_FILE`, as container secrets
# are mounted): keys kept out of the process environment, which any child process and any
# `ps e` on the host can read.
FROM_FILE = ("RECON_API_KEYS", "RECON_OPERATOR_KEYS", "RECON_ADMIN_KEYS")


def _env_or_file(name: str) -> str:
    path = os.environ.get(f"{name}_FILE", "").strip()
    if not path:
        return _env(name)
    if name in os.environ:
        raise ConfigError(f"set {name} or {name}_FILE, not both")
    try:
        with open(path) as source:
            # One entry a line or comma separated, as in the variable; # starts a comment.
            lines = (line.partition("#")[0].strip() for line in source)
            return ",".join(line for line in lines if line)
    except OSError as error:
        raise ConfigError(f"{name}_FILE: cannot read {path!r} ({error.strerror})") from None


def _default_float(name: str) -> float:
    return float(DEFAULTS[name])


N = TypeVar("N", int, float)
V = TypeVar("V")


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the variable and the fix."""


def _pairs(name: str, raw: str) -> dict[str, str]:
    """Parse "a=b,c=d" into {"a": "b", "c": "d"}."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        left, sep, right = item.partition("=")
        if not sep or not left.strip() or not right.strip():
            raise ConfigError(f"{name}: expected comma-separated name=value pairs, got {item!r}")
        out[left.strip()] = right.strip()
    return out


def _float(name: str) -> float:
    raw = _env(name)
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected a number of seconds, got {raw!r}") from None
    # float() reads 'nan' and 'inf' too: nan passed `<= 0` and failed at the first use
    # (timedelta(seconds=nan) in a drift scan), inf and a huge value overflowed there.
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name}: must be a positive number of seconds, got {raw!r}")
    try:
        timedelta(seconds=value)
    except OverflowError:
        raise ConfigError(f"{name}: too long a time, got {raw!r}") from None
    return value


def _milliseconds(name: str, maximum: float = 1000) -> float:
    """A wait in milliseconds, 0 (no wait) to `maximum`; returned in seconds."""
    raw = _env(name)
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected a number of milliseconds, got {raw!r}") from None
    if not 0 <= value <= maximum:
        raise ConfigError(f"{name}: must be between 0 and {maximum:g}, got {raw!r}")
    return value / 1000


def _whole(raw: str) -> bool:
    """Whether `raw` is a whole number int() reads: ASCII digits only (str.isdigit also
    accepts '²' and other digits int() refuses, which crashed start-up with a traceback)."""
    return raw.isascii() and raw.isdigit()


def _int(name: str, minimum: int = 1, maximum: int | None = None) -> int:
    raw = _env(name)
    if not _whole(raw.strip()) or int(raw) < minimum:
        raise ConfigError(f"{name}: expected a whole number >= {minimum}, got {raw!r}")
    if maximum is not None and int(raw) > maximum:
        raise ConfigError(f"{name}: expected a whole number <= {maximum}, got {raw!r}")
    return int(raw)


@dataclass(frozen=True)
class Operator:
    """What an operator key (RECON_OPERATOR_KEYS, key=tenant:person) names."""

    tenant: str
    person: str


@dataclass(frozen=True)
class ProviderAccount:
    """A tenant's own account at a provider (RECON_PROVIDER_ACCOUNTS), which its calls,
    lookups and drift use instead of the shared one (services.providers.accounts)."""

    base_url: str
    # Its credential (RECON_PROVIDER_SECRETS `tenant/provider=...`); never the shared
    # account's, which must not travel to another base URL. Never logged.
    secret: str | None = field(default=None, repr=False)
    # The signing secrets of its webhook endpoint (RECON_WEBHOOK_SECRETS
    # `tenant/provider=...`), checked by `POST /v1/webhooks/{provider}/accounts/{tenant}`;
    # empty: the account's webhooks are refused (its effects are settled by lookups).
    webhook_secrets: tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class ReconcilerSettings:
    """The pull reconciler and the drift scan (services.pull_reconciler)."""

    # How often the pull tick runs; how long a leg stays dispatched/unknown before it
    # counts as stuck; lookups per (operation leg, attempt) before manual review; the delay
    # after the first lookup, doubling after each one, up to backoff_max_s.
    interval_s: float = _default_float("RECON_RECONCILE_INTERVAL_S")
    after_s: float = _default_float("RECON_RECONCILE_AFTER_S")
    budget: int = int(DEFAULTS["RECON_RECONCILE_BUDGET"])
    backoff_s: float = _default_float("RECON_RECONCILE_BACKOFF_S")
    backoff_max_s: float = _default_float("RECON_RECONCILE_BACKOFF_MAX_S")
    # A review request claimed but not followed by the leg leaving dispatched/unknown is
    # sent again after this long (a crash between the claim and the send).
    review_retry_s: float = _default_float("RECON_RECONCILE_REVIEW_RETRY_S")
    drift_interval_s: float = _default_float("RECON_DRIFT_INTERVAL_S")
    drift_window_s: float = _default_float("RECON_DRIFT_WINDOW_S")  # how far back it compares
    # A confirmed intent younger than this is not yet "without effect": the provider's list
    # may lag its answers.
    drift_grace_s: float = _default_float("RECON_DRIFT_GRACE_S")
    # Every Nth scheduled scan is a backstop: the whole window, cursors not read (moved on
    # over a whole listing, as by any scan), for what judging once passes over (a leg
    # failed after its effect was judged, an effect lost or listed late, a listing cut at
    # every scan).
    drift_backstop_every: int = int(DEFAULTS["RECON_DRIFT_BACKSTOP_EVERY"])
    # How long settled bookkeeping is kept (reconciler_leases of settled legs, review
    # resolutions of resolved reviews; drift ids for the drift window plus this), and how
    # often the reconciler deletes what is older.
    retention_s: float = _default_float("RECON_RECONCILER_RETENTION_S")
    purge_interval_s: float = _default_float("RECON_PURGE_INTERVAL_S")


# The most partitions a topic may be given: a decider holds one transactional producer, with
# its own connections, per input partition it owns, so a lone decider of a deployment at
# this bound holds 64 of them.
MAX_PARTITIONS = 64


@dataclass(frozen=True)
class TopicLayout:
    """How the topics recon creates are laid out: RECON_KAFKA_REPLICATION_FACTOR,
    RECON_KAFKA_MIN_INSYNC_REPLICAS and RECON_KAFKA_PARTITIONS (services.kafka_setup)."""

    replication_factor: int = int(DEFAULTS["RECON_KAFKA_REPLICATION_FACTOR"])
    min_insync_replicas: int = int(DEFAULTS["RECON_KAFKA_MIN_INSYNC_REPLICAS"])
    partitions: int = int(DEFAULTS["RECON_KAFKA_PARTITIONS"])

    def __post_init__(self) -> None:
        # Checked here too (_topic_layout checks the environment): with more in-sync
        # replicas required than copies exist, every acks=all write would be refused.
        if not 1 <= self.min_insync_replicas <= self.replication_factor:
            raise ValueError(
                f"min.insync.replicas {self.min_insync_replicas} must be between 1 and the "
                f"replication factor {self.replication_factor}"
            )
        if not 1 <= self.partitions <= MAX_PARTITIONS:
            raise ValueError(f"partitions {self.partitions} must be between 1 and {MAX_PARTITIONS}")


def _reconciler() -> ReconcilerSettings:
    return ReconcilerSettings(
        interval_s=_float("RECON_RECONCILE_INTERVAL_S"),
        after_s=_float("RECON_RECONCILE_AFTER_S"),
        budget=_int("RECON_RECONCILE_BUDGET"),
        backoff_s=_float("RECON_RECONCILE_BACKOFF_S"),
        backoff_max_s=_float("RECON_RECONCILE_BACKOFF_MAX_S"),
        review_retry_s=_float("RECON_RECONCILE_REVIEW_RETRY_S"),
        drift_interval_s=_float("RECON_DRIFT_INTERVAL_S"),
        drift_window_s=_float("RECON_DRIFT_WINDOW_S"),
        drift_grace_s=_float("RECON_DRIFT_GRACE_S"),
        # At most 100,000 scans (69 days at the default interval): past that a backstop
        # would in practice never run, and what it exists to find would leave the window.
        drift_backstop_every=_int("RECON_DRIFT_BACKSTOP_EVERY", maximum=100_000),
        retention_s=_float("RECON_RECONCILER_RETENTION_S"),
        purge_interval_s=_float("RECON_PURGE_INTERVAL_S"),
    )


@dataclass(frozen=True)
class Settings:
    kafka_bootstrap: str
    database_url: str
    topics: Topics
    environment: str
    # API key -> tenant. The key names the tenant; request bodies never do.
    api_keys: dict[str, str] = field(default_factory=dict)
    # API key -> the agents it may submit, abort and claim as (RECON_API_KEYS
    # "key=tenant:a|b"); a key not listed here speaks for any agent of its tenant.
    key_agents: dict[str, frozenset[str]] = field(default_factory=dict)
    # Operator key -> (tenant, person); authenticates as the tenant, and as an operator.
    operator_keys: dict[str, Operator] = field(
        default_factory=lambda: operator_keys(DEFAULTS["RECON_OPERATOR_KEYS"], {})
    )
    # Deployment admin key -> person (RECON_ADMIN_KEYS): the one role that sees drift
    # belonging to no tenant in full; no tenant's key, operator or agent, does.
    admin_keys: dict[str, str] = field(default_factory=dict)
    # tenant -> patterns of the provider resources its own provider account holds
    # (services.governance.resources); out of the box the demo tenant holds the sandbox.
    tenant_resources: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: tenant_resources(DEFAULTS["RECON_TENANT_RESOURCES"])
    )
    # provider name -> base URL of its API
    providers: dict[str, str] = field(default_factory=dict)
    # provider name -> the adapter that speaks its API (services.providers.registry); a
    # provider not named here speaks the sandbox's.
    provider_adapters: dict[str, str] = field(default_factory=dict)
    # provider name -> the API credential its adapter sends (never logged).
    provider_secrets: dict[str, str] = field(default_factory=dict)
    # (tenant, provider) -> that tenant's own account at the provider; a tenant not listed
    # for a provider uses the shared account above (services.providers.accounts).
    provider_accounts: dict[tuple[str, str], ProviderAccount] = field(default_factory=dict)
    # provider name -> its provider file (RECON_PROVIDER_FILES), spoken by the `declared`
    # adapter (services.providers.declared).
    provider_files: dict[str, str] = field(default_factory=dict)
    # provider name -> the drift listing's page cap of its accounts (RECON_DRIFT_LIST_PAGES);
    # a provider not named here keeps its adapter's own (max_list_pages).
    drift_list_pages: dict[str, int] = field(default_factory=dict)
    intake_host: str = DEFAULTS["RECON_INTAKE_HOST"]
    intake_port: int = int(DEFAULTS["RECON_INTAKE_PORT"])
    provider_timeout_s: float = _default_float("RECON_PROVIDER_TIMEOUT_S")
    # Classes and reversibilities whose steps wait for a person's approval.
    approval_required: frozenset[str] = frozenset({"destructive"})
    # Webhook ingress: provider -> accepted secrets (several during a rotation), provider ->
    # signature scheme (standard unless named), timestamp tolerance, dedupe horizon.
    webhook_secrets: dict[str, tuple[str, ...]] = field(
        default_factory=lambda: webhook_settings(DEFAULTS["RECON_WEBHOOK_SECRETS"], "")[0]
    )
    webhook_schemes: dict[str, Scheme] = field(default_factory=dict)
    webhook_tolerance_s: int = int(DEFAULTS["RECON_WEBHOOK_TOLERANCE_S"])
    webhook_dedupe_horizon_s: int = MIN_DEDUPE_HORIZON_S
    reconciler: ReconcilerSettings = field(default_factory=ReconcilerSettings)
    # Replication, min.insync.replicas and partitions of the topics recon creates.
    topic_layout: TopicLayout = field(default_factory=TopicLayout)
    max_body_bytes: int = MAX_BODY_BYTES
    webhook_max_body_bytes: int = WEBHOOK_MAX_BODY_BYTES
    pending_horizon_s: float = PENDING_HORIZON_S
    # The tenants whose Kafka intents topic is read (services.intake.kafka_intents); empty:
    # every tenant of api_keys.
    intent_tenants: tuple[str, ...] = ()
    # Where this process serves its Prometheus metrics; None: the process's own default
    # port (services.metrics).
    metrics_port: int | None = None
    metrics_host: str = DEFAULTS["RECON_METRICS_HOST"]
    # How long an agent session owns a transaction after its submission or claim.
    owner_lease_s: int = int(DEFAULTS["RECON_OWNER_LEASE_S"])
    # How long the projector may go without polling its assigned partitions before it
    # exits for its supervisor to restart it (services.projector.stall_watch).
    projector_stall_s: float = _default_float("RECON_PROJECTOR_STALL_S")
    checkpoint_interval_s: float = _default_float("RECON_CHECKPOINT_INTERVAL_S")
    # Receipts being built at once in one intake: each reads Kafka and parses the
    # transaction's window on the event loop every other tenant's requests share.
    receipt_concurrency: int = int(DEFAULTS["RECON_RECEIPT_CONCURRENCY"])
    # 0: every fetch's decisions commit at once, evidence or not.
    decider_group_commit_s: float = _default_float("RECON_DECIDER_GROUP_COMMIT_MS") / 1000
    # Whether the decider calls the providers of what it dispatches (services.decider.
    # dispatch_host); off only for tests that play the provider's part themselves.
    decider_calls: bool = True
    # 0: readers fetch again at once, whatever the last fetch brought.
    reader_batch_wait_s: float = _default_float("RECON_READER_BATCH_WAIT_MS") / 1000
    saga_batch_wait_s: float = _default_float("RECON_SAGA_BATCH_WAIT_MS") / 1000
    # The key of the owner tokens a submission or a claim returns (issue 18, item 5).
    owner_token_secret: str = DEFAULTS["RECON_OWNER_TOKEN_SECRET"]
    # Policy documents per tenant installed by the intake at start-up (services.intake.policy).
    policy_file: str = ""

    @property
    def group_prefix(self) -> str:
        return self.topics.prefix


def webhook_settings(
    secrets_raw: str, schemes_raw: str, declared: dict[str, Scheme] | None = None
) -> tuple[dict[str, tuple[str, ...]], dict[str, Scheme]]:
    """RECON_WEBHOOK_SECRETS ("sandbox=whsec_a|whsec_b,...") and RECON_WEBHOOK_SCHEMES
    ("sandbox=standard,..."), each secret checked against its provider's scheme: the one
    named, else the one its adapter declares (`declared`), else standard."""
    schemes: dict[str, Scheme] = {}
    for provider, raw in _pairs("RECON_WEBHOOK_SCHEMES", schemes_raw).items():
        try:
            schemes[provider] = Scheme(raw)
        except ValueError:
            raise ConfigError(
                f"RECON_WEBHOOK_SCHEMES: provider {provider!r} has scheme {raw!r}; "
                f"use {' or '.join(s.value for s in Scheme)}"
            ) from None
    named = set(schemes)
    schemes = {**(declared or {}), **schemes}
    secrets: dict[str, tuple[str, ...]] = {}
    for left, raw in _pairs("RECON_WEBHOOK_SECRETS", secrets_raw).items():
        # `tenant/provider=...`: a tenant's own account (attached by account_webhooks).
        provider = left.partition("/")[2].strip() or left
        listed = tuple(filter(None, (part.strip() for part in raw.split("|"))))
        scheme = schemes.get(provider, Scheme.STANDARD)
        for secret in listed:
            try:
                key_for(scheme, secret)
            except InvalidSecretError as exc:
                raise ConfigError(
                    f"RECON_WEBHOOK_SECRETS: a secret of {left!r} is unusable "
                    f"for the {scheme.value} scheme: {exc}"
                ) from None
        secrets[left] = listed
    unsigned = sorted(named - {left.partition("/")[2].strip() or left for left in secrets})
    if unsigned:
        raise ConfigError(
            f"RECON_WEBHOOK_SCHEMES names {', '.join(unsigned)} without a secret in "
            "RECON_WEBHOOK_SECRETS; add one, or drop the scheme"
        )
    return secrets, schemes


def declared_schemes(
    adapters: dict[str, str], files: dict[str, "ProviderFile"] | None = None
) -> dict[str, Scheme]:
    """How each provider's adapter says its webhooks are signed (the class attribute of
    services.providers.interface.AdapterClass; a declared provider's file)."""
    from services.providers.interface import AdapterSetupError
    from services.providers.registry import adapter_class

    files = files or {}
    try:
        return {
            p: files[p].webhooks.scheme if p in files else adapter_class(name).webhook_scheme
            for p, name in adapters.items()
        }
    except AdapterSetupError as error:
        raise ConfigError(f"RECON_PROVIDER_ADAPTERS: {error}") from None


DECLARED_ADAPTER = "declared"
# RECON_DRIFT_LIST_PAGES's bound: the sandbox adapter's own cap, 100 pages of 100 effects,
# the most any built-in adapter holds in memory for one listing (a scan holds a listing
# whole while it judges it: ~3 MiB of sandbox effects, up to ~25 MiB of Stripe's payment
# intents at ~2.5 KiB each).
MAX_DRIFT_LIST_PAGES = 100


def drift_list_pages(
    raw: str, providers: dict[str, str], adapters: dict[str, str]
) -> dict[str, int]:
    """RECON_DRIFT_LIST_PAGES ("stripe=30,..."): each provider configured, its adapter
    one that takes a page cap (a `max_list_pages` attribute: the sandbox's, Stripe's; a
    declared provider's is its file's `[listing] max_pages`, one place for it), each cap
    a whole number from 1 to MAX_DRIFT_LIST_PAGES."""
    from services.providers.registry import DEFAULT_ADAPTER, adapter_class

    named = _pairs("RECON_DRIFT_LIST_PAGES", raw)
    caps: dict[str, int] = {}
    for provider, pages in named.items():
        if provider not in providers:
            raise ConfigError(
                f"RECON_DRIFT_LIST_PAGES names provider {provider!r}, which RECON_PROVIDERS "
                f"does not configure ({', '.join(sorted(providers)) or 'none'})"
            )
        adapter = adapters.get(provider, DEFAULT_ADAPTER)
        if adapter == DECLARED_ADAPTER:
            raise ConfigError(
                f"RECON_DRIFT_LIST_PAGES names provider {provider!r}, which its provider file "
                "declares: set its `[listing] max_pages` there instead"
            )
        if not isinstance(getattr(adapter_class(adapter), "max_list_pages", None), int):
            raise ConfigError(
                f"RECON_DRIFT_LIST_PAGES names provider {provider!r}, whose adapter "
                f"{adapter!r} takes no page cap (no `max_list_pages`)"
            )
        if not _whole(pages) or not 1 <= int(pages) <= MAX_DRIFT_LIST_PAGES:
            raise ConfigError(
                f"RECON_DRIFT_LIST_PAGES: provider {provider!r}: expected a whole number of "
                f"pages from 1 to {MAX_DRIFT_LIST_PAGES}, got {pages!r}"
            )
        caps[provider] = int(pages)
    return caps


def provider_files(paths: dict[str, str]) -> dict[str, "ProviderFile"]:
    """RECON_PROVIDER_FILES ("acme=/etc/recon/acme.toml,..."): each file loaded and
    validated now, so a mistake stops start-up naming its file and line."""
    from services.providers.declared.locate import DeclarationError, load

    loaded = {}
    for provider, path in paths.items():
        try:
            loaded[provider] = load(path)
        except DeclarationError as error:
            raise ConfigError(f"RECON_PROVIDER_FILES: provider {provider!r}: {error}") from None
    return loaded


def with_files(
    providers: dict[str, str], adapters: dict[str, str], files: dict[str, "ProviderFile"]
) -> tuple[dict[str, str], dict[str, str]]:
    """A declared provider is configured by its file: its base URL unless RECON_PROVIDERS
    names another (per environment), and the `declared` adapter, which no other
    RECON_PROVIDER_ADAPTERS entry may contradict."""
    for provider in files:
        if adapters.get(provider, DECLARED_ADAPTER) != DECLARED_ADAPTER:
            raise ConfigError(
                f"RECON_PROVIDER_FILES declares provider {provider!r}, which "
                f"RECON_PROVIDER_ADAPTERS gives the {adapters[provider]!r} adapter; drop one"
            )
    return (
        {**{p: f.base_url for p, f in files.items()}, **providers},
        {**adapters, **dict.fromkeys(files, DECLARED_ADAPTER)},
    )


def horizons_kept(dedupe_horizon_s: int, files: dict[str, "ProviderFile"]) -> int:
    """The webhook dedupe horizon recon keeps (and so the evidence it guards): at least
    as long as any declared provider may still deliver late (its `webhooks.horizon`), so
    a late redelivery never counts as new."""
    return max([dedupe_horizon_s, *(int(f.webhooks.horizon) for f in files.values())])


def provider_adapters(raw: str, providers: dict[str, str]) -> dict[str, str]:
    """RECON_PROVIDER_ADAPTERS ("stripe=stripe,..."): each named adapter must be installed
    (an entry point of services.providers.registry's group) and each provider configured."""
    from services.providers.registry import ENTRY_POINT_GROUP, adapter_names

    named = _pairs("RECON_PROVIDER_ADAPTERS", raw)
    installed = adapter_names()
    for provider, adapter in named.items():
        if provider not in providers:
            raise ConfigError(
                f"RECON_PROVIDER_ADAPTERS names provider {provider!r}, which RECON_PROVIDERS "
                f"does not configure ({', '.join(sorted(providers)) or 'none'})"
            )
        if adapter not in installed:
            raise ConfigError(
                f"RECON_PROVIDER_ADAPTERS: provider {provider!r} names adapter {adapter!r}, "
                f"which no installed package provides; installed: "
                f"{', '.join(sorted(installed)) or 'none'} (entry point group "
                f"{ENTRY_POINT_GROUP!r}, docs/providers.md)"
            )
    return named


def _provider_secrets() -> dict[str, str]:
    try:
        return _pairs("RECON_PROVIDER_SECRETS", _env("RECON_PROVIDER_SECRETS"))
    except ConfigError:
        # Without the offending item: it holds a credential, and errors are logged.
        raise ConfigError(
            "RECON_PROVIDER_SECRETS: expected comma-separated provider=secret or "
            "tenant/provider=secret pairs"
        ) from None


def _account_of(
    name: str, left: str, providers: dict[str, str], tenants: set[str]
) -> tuple[str, str]:
    """ "tenant/provider", both configured elsewhere: an account for a tenant no key names,
    or at a provider no step may name, is a typo that would leave the tenant on the shared
    account while its operator believes otherwise."""
    tenant, slash, provider = (part.strip() for part in left.partition("/"))
    if not slash or not tenant or not provider:
        raise ConfigError(f"{name}: expected tenant/provider before '=', got {left!r}")
    if _valid_tenant(name, tenant) not in tenants:
        raise ConfigError(
            f"{name}: tenant {tenant!r} has no key in RECON_API_KEYS or RECON_OPERATOR_KEYS"
        )
    if provider not in providers:
        raise ConfigError(
            f"{name}: provider {provider!r} of tenant {tenant!r} is not configured in "
            f"RECON_PROVIDERS ({', '.join(sorted(providers)) or 'none'})"
        )
    return tenant, provider


def account_webhooks(
    webhook_secrets: dict[str, tuple[str, ...]],
    accounts: dict[tuple[str, str], ProviderAccount],
    providers: dict[str, str],
    tenants: set[str],
) -> tuple[dict[str, tuple[str, ...]], dict[tuple[str, str], ProviderAccount]]:
    """Split webhook_settings' secrets into the shared accounts' (`provider=...`) and each
    tenant's own account's (`tenant/provider=...`, which must name an account of
    RECON_PROVIDER_ACCOUNTS): a tenant's endpoint is signed with its own secret, and only
    that secret may prove an effect of its account (services.intake.webhooks)."""
    shared, own = _by_account(
        "RECON_WEBHOOK_SECRETS", webhook_secrets, accounts, providers, tenants, "secret"
    )
    return shared, {
        account: replace(configured, webhook_secrets=own.get(account, ()))
        for account, configured in accounts.items()
    }


def _by_account(
    name: str,
    values: dict[str, V],
    own: Collection[tuple[str, str]],
    providers: dict[str, str],
    tenants: set[str],
    what: str,
) -> tuple[dict[str, V], dict[tuple[str, str], V]]:
    """`name`'s `provider=...` entries (the shared accounts') and `tenant/provider=...`
    ones (a tenant's own account's, which must be among the configured accounts `own`)."""
    shared: dict[str, V] = {}
    per_account: dict[tuple[str, str], V] = {}
    for left, value in values.items():
        if "/" not in left:
            shared[left] = value
            continue
        account = _account_of(name, left, providers, tenants)
        if account not in own:
            raise ConfigError(
                f"{name}: {left!r} names an account RECON_PROVIDER_ACCOUNTS "
                f"does not configure; add its base URL there, or drop the {what}"
            )
        per_account[account] = value
    return shared, per_account


def provider_accounts(
    accounts_raw: str, secrets: dict[str, str], providers: dict[str, str], tenants: set[str]
) -> tuple[dict[str, str], dict[tuple[str, str], ProviderAccount]]:
    """RECON_PROVIDER_ACCOUNTS ("tenant/provider=base URL,...") with RECON_PROVIDER_SECRETS
    (`secrets`, parsed): the shared accounts' credentials (`provider=...`) and each
    tenant's own account with its credential (`tenant/provider=...`, which must name a
    configured account)."""
    own = {
        _account_of("RECON_PROVIDER_ACCOUNTS", left, providers, tenants): url
        for left, url in _pairs("RECON_PROVIDER_ACCOUNTS", accounts_raw).items()
    }
    shared, account_secrets = _by_account(
        "RECON_PROVIDER_SECRETS", secrets, own, providers, tenants, "credential"
    )
    return shared, {
        account: ProviderAccount(url, account_secrets.get(account)) for account, url in own.items()
    }


def _dedupe_horizon() -> int:
    return _no_shorter(
        "RECON_WEBHOOK_DEDUPE_HORIZON_S",
        _int("RECON_WEBHOOK_DEDUPE_HORIZON_S"),
        MIN_DEDUPE_HORIZON_S,
        "providers retry deliveries",
        f"{MIN_DEDUPE_HORIZON_S} (3 days)",
    )


def _no_shorter(name: str, seconds: N, minimum: float, than: str, least: str) -> N:
    if seconds < minimum:
        raise ConfigError(f"{name}: {seconds} s is shorter than {than}; use at least {least}")
    return seconds


def _topic_layout() -> TopicLayout:
    replication = _int("RECON_KAFKA_REPLICATION_FACTOR")
    min_insync = _int("RECON_KAFKA_MIN_INSYNC_REPLICAS")
    if min_insync > replication:
        raise ConfigError(
            f"RECON_KAFKA_MIN_INSYNC_REPLICAS: {min_insync} is more than "
            f"RECON_KAFKA_REPLICATION_FACTOR ({replication}); acks=all writes would all be "
            "refused. For a cluster use 3 and 2"
        )
    return TopicLayout(
        replication_factor=replication,
        min_insync_replicas=min_insync,
        partitions=_int("RECON_KAFKA_PARTITIONS", maximum=MAX_PARTITIONS),
    )


def _valid_tenant(name: str, tenant: str) -> str:
    if not tenant.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"{name}: tenant {tenant!r} may hold only [A-Za-z0-9_-]")
    return tenant


def agent_keys(raw: str) -> tuple[dict[str, str], dict[str, frozenset[str]]]:
    """RECON_API_KEYS: "key=tenant" or "key=tenant:agent-a|agent-b,...": key -> tenant, and
    key -> the agents it speaks for, for the keys that name them (the others speak for
    any agent of their tenant: the deployment chose so by naming none)."""
    tenants: dict[str, str] = {}
    agents: dict[str, frozenset[str]] = {}
    for key, value in _pairs("RECON_API_KEYS", raw).items():
        tenant, sep, named = value.partition(":")
        tenants[key] = _valid_tenant("RECON_API_KEYS", tenant.strip())
        if sep:
            bound = frozenset(a.strip() for a in named.split("|") if a.strip())
            if not bound or any(len(a) > 128 for a in bound):
                raise ConfigError(
                    f"RECON_API_KEYS: key of tenant {tenant!r}: after ':' name one or more "
                    "agent ids (at most 128 characters each) separated by '|'"
                )
            agents[key] = bound
    return tenants, agents


def operator_keys(raw: str, api_keys: dict[str, str]) -> dict[str, Operator]:
    """RECON_OPERATOR_KEYS: "key=tenant:person,..."."""
    operators: dict[str, Operator] = {}
    for key, owner in _pairs("RECON_OPERATOR_KEYS", raw).items():
        tenant, colon, person = owner.partition(":")
        if not colon or not person.strip():
            raise ConfigError(
                f"RECON_OPERATOR_KEYS: expected key=tenant:person, got {key}={owner!r}"
            )
        if key in api_keys:
            # One key, two meanings: whichever won would silently grant or withhold.
            raise ConfigError("RECON_OPERATOR_KEYS: a key is also listed in RECON_API_KEYS")
        operators[key] = Operator(
            _valid_tenant("RECON_OPERATOR_KEYS", tenant.strip()), person.strip()
        )
    return operators


def admin_keys(raw: str, tenant_keys: set[str]) -> dict[str, str]:
    """RECON_ADMIN_KEYS: "key=person,...". Deployment-wide, so apart from every tenant's
    keys: a key that named a tenant too would carry the admin's view into a tenant's."""
    admins = _pairs("RECON_ADMIN_KEYS", raw)
    if tenant_keys & admins.keys():
        raise ConfigError(
            "RECON_ADMIN_KEYS: a key is also listed in RECON_API_KEYS or RECON_OPERATOR_KEYS"
        )
    return admins


def tenant_resources(raw: str) -> dict[str, tuple[str, ...]]:
    """RECON_TENANT_RESOURCES: "tenant=pattern|pattern,..."."""
    return {
        _valid_tenant("RECON_TENANT_RESOURCES", tenant): tuple(
            p.strip() for p in patterns.split("|") if p.strip()
        )
        for tenant, patterns in _pairs("RECON_TENANT_RESOURCES", raw).items()
    }


def _body_limit(name: str) -> int:
    limit = _int(name, minimum=1024)
    if limit > MAX_BODY_BYTES_CEILING:
        raise ConfigError(
            f"{name}: {limit} bytes would not fit one Kafka record with its envelope; "
            f"use at most {MAX_BODY_BYTES_CEILING}"
        )
    return limit


def _pending_horizon() -> float:
    return _no_shorter(
        "RECON_PENDING_HORIZON_S",
        _float("RECON_PENDING_HORIZON_S"),
        MIN_PENDING_HORIZON_S,
        "an unacknowledged command may still reach Kafka",
        f"{MIN_PENDING_HORIZON_S:.0f}",
    )


def _metrics_port() -> int | None:
    raw = _env("RECON_METRICS_PORT").strip()
    if not raw:
        return None
    if not _whole(raw) or not 0 < int(raw) < 65536:
        raise ConfigError(f"RECON_METRICS_PORT: expected a port number, got {raw!r}")
    return int(raw)


def _policy_file() -> str:
    path = _env("RECON_POLICY_FILE")
    if path and not os.path.isfile(path):
        raise ConfigError(f"RECON_POLICY_FILE: no such file {path!r}")
    return path


def _decider_calls() -> bool:
    value = _env("RECON_DECIDER_CALLS").strip().lower()
    if value not in ("on", "off"):
        raise ConfigError(f"RECON_DECIDER_CALLS: {value!r} is neither 'on' nor 'off'")
    return value == "on"


def _approval_required() -> frozenset[str]:
    """RECON_APPROVAL_REQUIRED: side-effect classes and reversibilities whose steps wait
    for a person's approval (events.approval_policy)."""
    from events.approval_policy import KNOWN

    named = frozenset(n.strip() for n in _env("RECON_APPROVAL_REQUIRED").split(",") if n.strip())
    if named - KNOWN:
        raise ConfigError(
            f"RECON_APPROVAL_REQUIRED: unknown {', '.join(sorted(named - KNOWN))}; "
            f"use some of {', '.join(sorted(KNOWN))}"
        )
    return named


# Where the shipped development defaults are acceptable: anywhere else a default that is
# public (it is in this file) would let anyone mint what it protects.
DEVELOPMENT_ENVIRONMENTS = frozenset({"dev", "test"})
MIN_SECRET_CHARS = 16


def _owner_token_secret(environment: str) -> str:
    """RECON_OWNER_TOKEN_SECRET: whoever knows it can forge any session's owner token and
    so abort, release or renew any transaction; the default is public."""
    secret = _env("RECON_OWNER_TOKEN_SECRET")
    if environment in DEVELOPMENT_ENVIRONMENTS:
        return secret
    if secret == DEFAULTS["RECON_OWNER_TOKEN_SECRET"]:
        raise ConfigError(
            "RECON_OWNER_TOKEN_SECRET: the development secret is public; set your own "
            f"(the same on every intake) when RECON_ENVIRONMENT is {environment!r}"
        )
    if len(secret) < MIN_SECRET_CHARS:
        raise ConfigError(
            f"RECON_OWNER_TOKEN_SECRET: at least {MIN_SECRET_CHARS} characters, got {len(secret)}"
        )
    return secret


def load_settings() -> Settings:
    api_keys, key_agents = agent_keys(_env_or_file("RECON_API_KEYS"))
    file_paths = _pairs("RECON_PROVIDER_FILES", _env("RECON_PROVIDER_FILES"))
    files = provider_files(file_paths)
    providers, adapters = with_files(
        _pairs("RECON_PROVIDERS", _env("RECON_PROVIDERS")),
        _pairs("RECON_PROVIDER_ADAPTERS", _env("RECON_PROVIDER_ADAPTERS")),
        files,
    )
    adapters = provider_adapters(",".join(f"{p}={a}" for p, a in adapters.items()), providers)
    webhook_secrets, webhook_schemes = webhook_settings(
        _env("RECON_WEBHOOK_SECRETS"),
        _env("RECON_WEBHOOK_SCHEMES"),
        declared_schemes(adapters, files),
    )
    operators = operator_keys(_env_or_file("RECON_OPERATOR_KEYS"), api_keys)
    tenants = {*api_keys.values(), *(o.tenant for o in operators.values())}
    secrets, accounts = provider_accounts(
        _env("RECON_PROVIDER_ACCOUNTS"), _provider_secrets(), providers, tenants
    )
    webhook_secrets, accounts = account_webhooks(webhook_secrets, accounts, providers, tenants)
    try:
        kafka_security.configured()  # checked here so a bad value stops the process at start
    except kafka_security.KafkaSecurityError as error:
        raise ConfigError(str(error)) from None
    port = _env("RECON_INTAKE_PORT")
    if not _whole(port):
        raise ConfigError(f"RECON_INTAKE_PORT: expected a port number, got {port!r}")
    return Settings(
        kafka_bootstrap=_env("RECON_KAFKA_BOOTSTRAP"),
        database_url=_env("RECON_DATABASE_URL"),
        topics=Topics(_env("RECON_TOPIC_PREFIX")),
        environment=_env("RECON_ENVIRONMENT"),
        api_keys=api_keys,
        operator_keys=operators,
        admin_keys=admin_keys(_env_or_file("RECON_ADMIN_KEYS"), {*api_keys, *operators}),
        tenant_resources=tenant_resources(_env("RECON_TENANT_RESOURCES")),
        key_agents=key_agents,
        providers=providers,
        provider_adapters=adapters,
        provider_secrets=secrets,
        provider_accounts=accounts,
        provider_files=file_paths,
        drift_list_pages=drift_list_pages(_env("RECON_DRIFT_LIST_PAGES"), providers, adapters),
        intake_host=_env("RECON_INTAKE_HOST"),
        intake_port=int(port),
        provider_timeout_s=_float("RECON_PROVIDER_TIMEOUT_S"),
        webhook_secrets=webhook_secrets,
        webhook_schemes=webhook_schemes,
        webhook_tolerance_s=_int("RECON_WEBHOOK_TOLERANCE_S"),
        webhook_dedupe_horizon_s=horizons_kept(_dedupe_horizon(), files),
        reconciler=_reconciler(),
        topic_layout=_topic_layout(),
        max_body_bytes=_body_limit("RECON_MAX_BODY_BYTES"),
        webhook_max_body_bytes=_body_limit("RECON_WEBHOOK_MAX_BODY_BYTES"),
        pending_horizon_s=_pending_horizon(),
        intent_tenants=tuple(
            _valid_tenant("RECON_KAFKA_INTENT_TENANTS", t.strip())
            for t in _env("RECON_KAFKA_INTENT_TENANTS").split(",")
            if t.strip()
        ),
        metrics_port=_metrics_port(),
        metrics_host=_env("RECON_METRICS_HOST"),
        owner_lease_s=_int("RECON_OWNER_LEASE_S", minimum=1),
        projector_stall_s=_float("RECON_PROJECTOR_STALL_S"),
        checkpoint_interval_s=_float("RECON_CHECKPOINT_INTERVAL_S"),
        receipt_concurrency=_int("RECON_RECEIPT_CONCURRENCY", minimum=1),
        decider_group_commit_s=_milliseconds("RECON_DECIDER_GROUP_COMMIT_MS"),
        decider_calls=_decider_calls(),
        reader_batch_wait_s=_milliseconds("RECON_READER_BATCH_WAIT_MS", maximum=50),
        saga_batch_wait_s=_milliseconds("RECON_SAGA_BATCH_WAIT_MS", maximum=1000),
        owner_token_secret=_owner_token_secret(_env("RECON_ENVIRONMENT")),
        policy_file=_policy_file(),
        approval_required=_approval_required(),
    )
