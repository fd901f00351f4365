"""When a projector that is alive but not projecting must give up and be restarted.

Seen once in a chaos run (issue 10's note, issue 18 item 15): after a Kafka restart and a
Postgres kill -9 the projector stayed alive, logged nothing, and its consumer group stayed
empty for good. aiokafka awaits the rebalance listener (the seek to the stored offsets)
before it heartbeats or fetches again, so anything that never returns inside it leaves a
process that looks alive and projects nothing. Whatever the await, a process restart
(the supervisor's, services.devtools.restarts) starts from the stored offsets and loses
nothing: the database owns the position.

Healthy means: the consumer loop polled with partitions assigned and no rebalance listener
was running. Pure; the runtime feeds it the clock.
"""

from dataclasses import dataclass

# The exit status of a projector that gave up (os._exit: a graceful stop would await the
# very consumer that is stuck).
STALLED_EXIT_CODE = 75


@dataclass
class StallWatch:
    limit_s: float
    healthy_at: float
    # Rebalance listeners running now (aiokafka runs one at a time; a count is exact anyway).
    seeking: int = 0

    def polled(self, assigned: bool, now: float) -> None:
        if assigned and not self.seeking:
            self.healthy_at = now

    def stalled_for(self, now: float) -> float | None:
        """How long it has been unhealthy, once that reaches the limit; None before."""
        idle = now - self.healthy_at
        return idle if idle >= self.limit_s else None
