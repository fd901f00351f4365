"""Topic names.

commands, observations and events are co-partitioned (same partition count, same
key) so that one decider owns partition p of both inputs and of the output together.
A prefix lets tests run on fresh topics against a shared broker.
"""

from dataclasses import dataclass

# The partition count of every topic recon creates unless RECON_KAFKA_PARTITIONS says
# otherwise (services.config.TopicLayout; docs/scaling.md "Partitions").
PARTITIONS = 4


@dataclass(frozen=True)
class Topics:
    prefix: str = ""

    @property
    def commands(self) -> str:
        return f"{self.prefix}recon.commands"

    @property
    def observations(self) -> str:
        return f"{self.prefix}recon.observations"

    @property
    def events(self) -> str:
        return f"{self.prefix}recon.events"

    @property
    def decider_state(self) -> str:
        """Compacted changelog of decider state, keyed like the events, so a decider
        restores a partition from one record per transaction, not from all history."""
        return f"{self.prefix}recon.decider-state"

    @property
    def drift(self) -> str:
        """DriftDetected reports (events.drift), keyed by drift id."""
        return f"{self.prefix}recon.drift"

    @property
    def governance(self) -> str:
        """Policy, kill switch and breaker changes (events.governance), keyed by tenant."""
        return f"{self.prefix}recon.governance"

    @property
    def checkpoints(self) -> str:
        """Signed checkpoints of the chain heads the decider wrote (events.checkpoint),
        on the partition of the events they cover, written in the same Kafka transaction."""
        return f"{self.prefix}recon.checkpoints"

    @property
    def dead_letters(self) -> str:
        return f"{self.prefix}recon.dead-letters"

    def intents(self, tenant: str) -> str:
        """Where the agents of `tenant` produce their intents over Kafka (keyed
        `tenant/tx_id`): one topic per tenant, so the broker's ACL on the topic, not the
        record, says whose intent it is (README, "Agents that speak Kafka")."""
        return f"{self.prefix}recon.intents.{tenant}"

    def intent_replies(self, tenant: str) -> str:
        """The answers to `tenant`'s Kafka intents, keyed by tx_id; per tenant, so no tenant
        reads another's tx_ids or refusals."""
        return f"{self.prefix}recon.intent-replies.{tenant}"

    def tenant_of_intents(self, topic: str) -> str | None:
        """The tenant whose intents topic `topic` is, or None."""
        head = f"{self.prefix}recon.intents."
        return topic[len(head) :] if topic.startswith(head) else None

    def decider_inputs(self) -> tuple[str, str]:
        return (self.commands, self.observations)
