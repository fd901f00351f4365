"""The shape of a provider file (README "Connecting a provider", docs/examples/acme.toml):
pydantic models, so every mistake is a validation error with a location that
services.providers.declared.locate turns into the file's line.

Values the file writes:
- a pointer (`/result/record/ref`) is a JSON pointer into a payload or an answer;
- a source (what a body field or a query parameter carries) is a payload pointer, or
  `$key` (the op key: recon's reference and the idempotency key);
- a path template (`/api/v2/holds/{/reverses/remote_id}/release`) holds payload pointers
  in braces, each replaced by one percent-escaped segment (services.providers.paths);
- a duration is seconds (a number) or a number with a unit: `90s`, `30m`, `24h`, `30d`.
"""

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from events.catalog import Reversibility, SideEffect
from reconcilers.signatures import Scheme

KEY = "$key"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
# Statuses a rule may name: a number, or a family written `2xx`..`5xx`.
_FAMILY = re.compile(r"^[2-5]xx$")
# A query parameter's name a file may declare: no character a query gives a meaning to
# (`&`, `=`, `#`, `+`, `%`, a space), brackets allowed for names like Stripe's `created[gte]`.
_QUERY_KEY = re.compile(r"^[A-Za-z0-9_.\-\[\]]+$")


def _pointer(value: str) -> str:
    if not value.startswith("/") or value == "/":
        raise ValueError(f"{value!r} is not a JSON pointer (write it as /field or /a/b)")
    return value


def _source(value: str) -> str:
    return value if value == KEY else _pointer(value)


def _duration(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a duration is seconds or a string like '24h'")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        found = _DURATION.match(value)
        if found:
            return float(found.group(1)) * _UNITS[found.group(2)]
    raise ValueError(f"{value!r} is not a duration: write seconds, or e.g. '90s', '30m', '24h'")


def _status(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    if isinstance(value, str) and _FAMILY.match(value):
        return value
    raise ValueError(f"{value!r} is not an HTTP status: write e.g. 201 or '4xx'")


Pointer = Annotated[str, AfterValidator(_pointer)]
Source = Annotated[str, AfterValidator(_source)]
Seconds = Annotated[float, BeforeValidator(_duration), Field(ge=0)]
Status = Annotated[int | str, BeforeValidator(_status)]
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]


def placeholders(template: str) -> list[str]:
    """The payload pointers a path template names, in order."""
    return _PLACEHOLDER.findall(template)


def _template(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r}: a path starts with '/' (the base URL comes before it)")
    for name in placeholders(value):
        if name != KEY:
            _pointer(name)
    if "{" in _PLACEHOLDER.sub("", value) or "}" in _PLACEHOLDER.sub("", value):
        raise ValueError(f"{value!r}: unbalanced braces")
    return value


Template = Annotated[str, AfterValidator(_template)]


def _query_key(value: str) -> str:
    if not _QUERY_KEY.match(value):
        raise ValueError(
            f"{value!r} is not a query parameter's name: letters, digits and _ - . [ ] only"
        )
    return value


QueryKey = Annotated[str, AfterValidator(_query_key)]


class Strict(BaseModel):
    # A key the format does not have is a mistake (a typo'd `idempotency_header` would
    # otherwise be silently ignored, and the key never sent).
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Credentials(Strict):
    """How the credential is sent, and where recon reads it: RECON_PROVIDER_SECRETS first,
    else the environment variable `env`, else the file `file`. Never in this file."""

    header: str = "Authorization"
    format: str = "Bearer {secret}"
    env: str | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _formats_the_secret(self) -> "Credentials":
        if "{secret}" not in self.format:
            raise ValueError("format must contain {secret}, where the credential goes")
        return self


class Idempotency(Strict):
    """Where the op key travels as the provider's idempotency key: a header, or a body
    field (exactly one)."""

    header: str | None = None
    body: Pointer | None = None
    # Declared fact: the provider refuses the key sent again with another payload (the
    # contract kit checks it); false means a changed payload could pass for the first.
    refuses_other_payload: bool = True

    @model_validator(mode="after")
    def _one_place(self) -> "Idempotency":
        if (self.header is None) == (self.body is None):
            raise ValueError("say where the idempotency key goes: header = '...' or body = '/...'")
        return self


Means = Literal["confirmed", "refused", "key_conflict", "unknown"]


class Rule(Strict):
    """One rule of what an answer means: its status (any of `status`) and, when given, the
    body values at pointers (`when`: pointer -> a value or a list of accepted values).
    The first matching rule wins; nothing matched is `unknown`."""

    status: list[Status] = Field(min_length=1)
    when: dict[Pointer, str | int | bool | list[str | int | bool]] = Field(default_factory=dict)
    means: Means
    # Where the provider's id of the effect is (confirmed answers need one).
    id: Pointer | None = None

    @model_validator(mode="after")
    def _confirmed_names_its_id(self) -> "Rule":
        if self.means == "confirmed" and self.id is None:
            raise ValueError("a confirmed answer says where the effect's id is: id = '/...'")
        return self


class FieldSpec(Strict):
    """One payload field, for the payload schema checked at the door."""

    type: Literal["string", "integer", "number", "boolean", "object"]
    required: bool = True
    minimum: float | None = None
    maximum: float | None = None
    max_length: int | None = Field(default=None, ge=1)

    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        for name, key in (
            ("minimum", "minimum"),
            ("maximum", "maximum"),
            ("max_length", "maxLength"),
        ):
            if getattr(self, name) is not None:
                out[key] = getattr(self, name)
        return out


class Operation(Strict):
    side_effect: SideEffect = Field(alias="class")
    reversibility: Reversibility
    compensation: str | None = None
    amount_field: str | None = None
    fields: dict[str, FieldSpec] = Field(default_factory=dict)
    method: Method = "POST"
    path: Template
    # body pointer -> what it carries (a payload pointer or $key); without a body table
    # the payload is sent as it is.
    body: dict[Pointer, Source] | None = None
    answers: list[Rule] = Field(default_factory=list)
    # A 202 with nothing to read: true when this operation's provider takes it as done
    # (fire and forget: nothing will tell more); false leaves it unknown for a lookup.
    accepted_is_final: bool = False

    def payload_schema(self) -> dict[str, Any] | None:
        if not self.fields:
            return None
        return {
            "type": "object",
            "properties": {name: spec.json_schema() for name, spec in self.fields.items()},
            "required": sorted(name for name, spec in self.fields.items() if spec.required),
        }


class Query(Strict):
    """How the provider is asked what it holds under a key, and how its answer is read."""

    method: Literal["GET", "POST"] = "GET"
    path: Template
    # query parameter -> what it carries ($key: ask by key or by the reference recon sent).
    params: dict[str, Source] = Field(default_factory=dict)
    # Where the matching effects are (a list), each read with `id` and `state`.
    items: Pointer
    id: Pointer
    # Where an item holds the key it was made under: when given, only items under the
    # asked key count (a provider that ignored the filter proves nothing by its list).
    key: Pointer | None = None
    state: Pointer | None = None
    # The states that mean the effect is done; any other state is known but not done.
    done: list[str] = Field(default_factory=list)
    # Statuses that prove nothing is held under the key (besides an empty list).
    absent_status: list[Status] = Field(default_factory=list)


class Lookup(Strict):
    strategy: Literal["query", "replay", "none"]
    # replay: how long the provider replays a key's first answer.
    key_retention: Seconds | None = None
    # query, or replay past the retention when the provider can also be asked.
    query: Query | None = None

    @model_validator(mode="after")
    def _strategy_has_what_it_needs(self) -> "Lookup":
        if self.strategy == "query" and self.query is None:
            raise ValueError("strategy 'query' needs a [lookup.query] table")
        if self.strategy == "replay" and not self.key_retention:
            raise ValueError("strategy 'replay' needs key_retention (e.g. '24h')")
        if self.strategy != "replay" and self.key_retention is not None:
            raise ValueError("key_retention is a fact of the 'replay' strategy only")
        if self.strategy == "none" and self.query is not None:
            raise ValueError("strategy 'none' asks nothing: drop [lookup.query]")
        return self


class Listing(Strict):
    """The provider's list of effects for the drift scan, page by page."""

    path: Template
    params: dict[str, str] = Field(default_factory=dict)
    items: Pointer
    id: Pointer
    key: Pointer
    kind: Pointer
    # the value at `kind` -> the operation's name in recon
    operations: dict[str, str] = Field(min_length=1)
    created_at: Pointer
    payload: dict[str, Pointer] = Field(default_factory=dict)
    # Paging: the next page's cursor in the answer, sent back as `cursor_param`; or, as
    # Stripe pages, where the answer says more follow (`more`, true), the next page then
    # asked for after the last listed item's `id`.
    next: Pointer | None = None
    more: Pointer | None = None
    cursor_param: str | None = None
    max_pages: int = Field(default=10, ge=1, le=1000)
    # The query parameter that asks for the effects created at or after an instant, and
    # how its value is written: the drift scan then asks for its window alone.
    since_param: QueryKey | None = None
    since_format: Literal["iso8601", "unix"] = "iso8601"
    # The query parameter that asks for the effects created before an instant (written as
    # since_format says): the drift scan then lists an account's hole below a cut listing
    # (reconcilers.drift_span.Hole). Needs since_param: a hole is asked for by both.
    until_param: QueryKey | None = None
    # The provider's declared list order: `newest_first` lets a listing cut at max_pages
    # cover every leg after its oldest listed effect; `unknown` (an order not declared)
    # covers none, as the effects left out may be any age.
    order: Literal["unknown", "newest_first"] = "unknown"

    @model_validator(mode="after")
    def _paging_both_or_neither(self) -> "Listing":
        if self.next is not None and self.more is not None:
            raise ValueError(
                "page by next = '/...' (a cursor in the answer) or by more = '/...' (a flag: "
                "the next page after the last item's id), not both"
            )
        if (self.next is None and self.more is None) != (self.cursor_param is None):
            raise ValueError(
                "paging needs both cursor_param = '...' and next = '/...' (or more = '/...')"
            )
        return self

    @model_validator(mode="after")
    def _since_is_its_own_parameter(self) -> "Listing":
        if self.since_param is None:
            if "since_format" in self.model_fields_set:
                raise ValueError(
                    "since_format says how since_param's value is written: name since_param too"
                )
            if self.until_param is not None:
                raise ValueError(
                    "until_param asks below an instant, for a span that since_param starts:"
                    " name since_param too"
                )
            return self
        taken = {*self.params, self.cursor_param}
        if self.since_param in taken:
            raise ValueError(
                f"since_param {self.since_param!r} is already a parameter of the listing"
            )
        if self.until_param is not None and self.until_param in taken | {self.since_param}:
            raise ValueError(
                f"until_param {self.until_param!r} is already a parameter of the listing"
            )
        return self


class RateLimit(Strict):
    """`429` with `Retry-After`: waited out up to `max_wait` (the same request, under the
    same key), never a failure; longer waits leave the outcome unknown for later."""

    retry_after_header: str = "Retry-After"
    max_wait: Seconds = 5.0


class WebhookEvents(Strict):
    """How the provider's events are read: the effect an event is about, its id and the
    key it was made under (the idempotency key recon sent), and what each event type says
    of the operation; a type not listed is remembered and settles nothing."""

    # Where the effect is in an event, and its fields within it.
    effect: Pointer
    id: Pointer
    key: Pointer
    # Where the effect repeats recon's reference: compared, never matched on.
    reference: Pointer | None = None
    types: dict[str, Literal["succeeded", "rejected", "unknown"]] = Field(min_length=1)


class Webhooks(Strict):
    scheme: Scheme = Scheme.STANDARD
    # None: the provider sends recon's own format (docs/contract.md, "Webhooks").
    events: WebhookEvents | None = None
    # How long a late delivery may still arrive: recon keeps its dedupe and evidence at
    # least that long (start-up refuses a shorter RECON_WEBHOOK_DEDUPE_HORIZON_S).
    horizon: Seconds = 3 * 86400.0


class ProviderFile(Strict):
    base_url: str = Field(pattern=r"^https?://[^\s/]+")
    credentials: Credentials | None = None
    idempotency: Idempotency
    # The body field recon's reference (the op key) travels in, so a lookup or the drift
    # listing finds the effect later; None when the idempotency key is that reference.
    reference: Pointer | None = None
    # Rules for every operation, after each operation's own.
    answers: list[Rule] = Field(default_factory=list)
    operations: dict[str, Operation] = Field(min_length=1)
    lookup: Lookup
    listing: Listing | None = None
    rate_limit: RateLimit = Field(default_factory=RateLimit)
    webhooks: Webhooks = Field(default_factory=Webhooks)

    def mistakes(self) -> list[tuple[tuple[str | int, ...], str]]:
        """What the file gets wrong across tables (a name that names nothing), each with
        its location, as pydantic's errors have theirs."""
        found: list[tuple[tuple[str | int, ...], str]] = []
        for name, op in self.operations.items():
            if op.compensation is not None and op.compensation not in self.operations:
                found.append(
                    (
                        ("operations", name, "compensation"),
                        f"{op.compensation!r} is not an operation of this file",
                    )
                )
            if op.amount_field is not None and op.amount_field not in op.fields:
                found.append(
                    (("operations", name, "amount_field"), "not one of the operation's fields")
                )
        if self.listing is not None:
            for kind, operation in self.listing.operations.items():
                if operation not in self.operations:
                    found.append(
                        (("listing", "operations", kind), f"{operation!r} is not an operation")
                    )
        return found
