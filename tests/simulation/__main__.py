"""`python -m tests.simulation --seeds N [--seed S] [--bug NAME]`: run seeded schedules;
a failing seed prints the command that replays it."""

import argparse
import hashlib
import sys

from .bugs import BUGS
from .invariants import Violation
from .run import DEFAULT_SEEDS, Failure, run_many, run_one


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation")
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="how many schedules")
    parser.add_argument("--first", type=int, default=0, help="the first seed of the run")
    parser.add_argument("--seed", type=int, help="replay this one seed, printing its steps")
    parser.add_argument("--bug", choices=sorted(BUGS), help="inject this deliberate bug")
    parser.add_argument("--workers", type=int, default=0, help="processes (default: 2)")
    args = parser.parse_args()
    if args.seed is not None:
        try:
            world = run_one(args.seed, args.bug)
        except Violation as violation:
            print(f"seed {args.seed}: {violation}")
            return 1
        digest = hashlib.sha256(world.event_bytes()).hexdigest()
        print(f"seed {args.seed}: {len(world.trace)} steps, {world.events.end} events, ok")
        print(f"events sha256 {digest}")
        print(" ".join(world.trace))
        return 0
    result = run_many(args.seeds, args.first, args.bug, args.workers)
    print(f"{result.schedules} schedules in {result.seconds:.1f}s ({result.per_second:.0f}/s)")
    if result.failure is not None:
        report(result.failure, args.bug)
        return 1
    return 0


def report(failure: Failure, bug: str | None) -> None:
    print(f"seed {failure.seed} broke an invariant: {failure.problem}")
    print(f"replay: {failure.replay(bug)}")


if __name__ == "__main__":
    sys.exit(main())
