"""The consumer groups recon runs, by name (without the deployment's prefix,
`Settings.group_prefix`): the names each runtime joins with, GROUPS, the one list of them
that the intake's `/healthz` and its group watch (services.intake.group_watch) look at, and
the topics each reads (`inputs`: what its runtime subscribes and what the console counts its
lag over). A group that is not in GROUPS can stall, or lose its last member, unseen: a new
group is named here and joined by this name."""

from events.topics import Topics
from services.config import Settings

DECIDER = "recon-decider"
PROJECTOR = "recon-projector"
SAGA = "recon-saga"
INTENTS = "recon-intents"

GROUPS = (DECIDER, PROJECTOR, SAGA, INTENTS)


def intent_tenants(settings: Settings) -> list[str]:
    """RECON_KAFKA_INTENT_TENANTS, or else every tenant that has an agent key."""
    return sorted(settings.intent_tenants or set(settings.api_keys.values()))


def intents_inputs(topics: Topics, tenants: list[str]) -> list[str]:
    return [topics.intents(tenant) for tenant in tenants]


def inputs(name: str, settings: Settings) -> list[str]:
    """The topics group `name` subscribes."""
    topics = settings.topics
    if name == DECIDER:
        return list(topics.decider_inputs())
    if name == PROJECTOR:
        return [topics.events, topics.drift]
    if name == SAGA:
        return [topics.events]
    if name == INTENTS:
        return intents_inputs(topics, intent_tenants(settings))
    raise ValueError(f"{name!r} is not a consumer group recon runs: {', '.join(GROUPS)}")
