"""The settings of a reconciler that a drift test runs by hand against a test's stack."""

from events.topics import Topics
from services.config import ReconcilerSettings, Settings
from services.devtools.stack import Stack


def scanner_settings(stack: Stack, grace_s: float) -> Settings:
    return Settings(
        kafka_bootstrap=stack.kafka_bootstrap,
        database_url=stack.database_url,
        topics=Topics(stack.topic_prefix),
        environment="dev",
        providers={"sandbox": stack.sandbox_url},
        reconciler=ReconcilerSettings(drift_grace_s=grace_s),
    )
