"""When `make run` starts a recon service again that exited (services.devtools.stack).

One service exiting must not stop the stack (Kafka, Postgres and every other tenant's work
with it): it is started again after a back-off that doubles on each exit in a row, so a
service that exits at once on every start (a poison input, a bad setting) is retried
slowly and loudly instead of in a hot loop. A service that ran for `healthy_s` before it
exited starts again from the first delay. Pure: the stack's loop supplies the clock.
"""

from dataclasses import dataclass, field

FIRST_DELAY_S = 1.0
MAX_DELAY_S = 30.0
HEALTHY_S = 60.0


@dataclass
class Restarts:
    first_s: float = FIRST_DELAY_S
    max_s: float = MAX_DELAY_S
    healthy_s: float = HEALTHY_S
    # Per service: exits in a row, and when it was last started.
    exits: dict[str, int] = field(default_factory=dict)
    started_at: dict[str, float] = field(default_factory=dict)

    def started(self, name: str, now: float) -> None:
        self.started_at[name] = now

    def exited(self, name: str, now: float) -> float:
        """The delay before `name`, which exited at `now`, is started again."""
        ran = now - self.started_at.get(name, now)
        in_a_row = 0 if ran >= self.healthy_s else self.exits.get(name, 0)
        self.exits[name] = in_a_row + 1
        return float(min(self.max_s, self.first_s * 2**in_a_row))
