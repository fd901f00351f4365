"""Reads two snapshots of services/devtools/cpu_sampler and prints the process's CPU between
them by function: inclusive (the function with what it called) and, with --under, what each
function called directly from the one named shares.

    python -m services.devtools.cpu_samples FIRST.pkl LAST.pkl [--top 60] [--under NAME]

NAME is `file:function` as printed (e.g. services/decider/runtime.py:_decide_input): a file of
the sampled checkout is named from that checkout's root, wherever this is run from.
"""

import argparse
import collections
import functools
import pickle
import sys
from pathlib import Path


def _name(frame: tuple[str, str, int]) -> str:
    path, function, _ = frame
    for cut in ("site-packages/", f"/lib/python{sys.version_info[0]}.{sys.version_info[1]}/"):
        if cut in path:
            path = path.split(cut)[-1]
            break
    else:
        path = _from_checkout_root(path)
    return f"{path}:{function}"


@functools.cache
def _from_checkout_root(path: str) -> str:
    """A recon file as the repository names it, from the root of the checkout that was
    sampled (the nearest folder above it holding pyproject.toml), not from the current one:
    a worktree's samples read from another then still match --under."""
    for parent in Path(path).parents:
        if (parent / "pyproject.toml").is_file():
            return str(Path(path).relative_to(parent))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("last", type=Path)
    parser.add_argument("--top", type=int, default=60)
    parser.add_argument("--under")
    args = parser.parse_args()
    cpu0, before = pickle.loads(args.first.read_bytes())
    cpu1, after = pickle.loads(args.last.read_bytes())
    taken = {stack: n - before.get(stack, 0) for stack, n in after.items()}
    total = sum(taken.values()) or 1
    inclusive: collections.Counter[str] = collections.Counter()
    under: collections.Counter[str] = collections.Counter()
    for stack, n in taken.items():
        names = [_name(frame) for frame in reversed(stack)]  # outermost first
        for name in set(names):
            inclusive[name] += n
        if args.under in names:
            below = names.index(args.under) + 1
            under[names[below] if below < len(names) else "(itself)"] += n
    if args.under and not under:
        parser.error(
            f"--under {args.under!r} names no function in these samples "
            "(a name is file:function as printed without --under)"
        )
    print(f"{total} samples over {cpu1 - cpu0:.2f} s of the process's CPU")
    for name, n in (under if args.under else inclusive).most_common(args.top):
        print(f"{100 * n / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()
