"""services.devtools.cpu_samples names a sampled file from its own checkout's root, so samples
taken in one worktree read from another still match --under, and an --under that matches
nothing is an error, not an empty table."""

import importlib.util
import pickle
import subprocess
import sys
from pathlib import Path


def snapshots(tmp_path: Path) -> tuple[Path, Path]:
    checkout = tmp_path / "other-worktree"
    (checkout / "services").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    runtime = str(checkout / "services" / "runtime.py")
    # Innermost frame first, as the sampler stores a stack.
    stack = ((runtime, "seal", 9), (runtime, "decide", 5), (runtime, "loop", 1))
    first, last = tmp_path / "first.pkl", tmp_path / "last.pkl"
    first.write_bytes(pickle.dumps((1.0, {})))
    last.write_bytes(pickle.dumps((2.0, {stack: 4})))
    return first, last


def run(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "services.devtools.cpu_samples", *args]
    root = Path(__file__).resolve().parents[2]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=root)


def test_a_file_is_named_from_the_sampled_checkout_and_under_matches_it(tmp_path: Path) -> None:
    first, last = snapshots(tmp_path)
    table = run(str(first), str(last))
    assert table.returncode == 0, table.stderr
    assert "100.0 %  services/runtime.py:decide" in table.stdout
    under = run(str(first), str(last), "--under", "services/runtime.py:decide")
    assert under.returncode == 0, under.stderr
    assert "100.0 %  services/runtime.py:seal" in under.stdout


def test_an_under_matching_nothing_is_an_error(tmp_path: Path) -> None:
    first, last = snapshots(tmp_path)
    under = run(str(first), str(last), "--under", "services/runtime.py:absent")
    assert under.returncode == 2
    assert "names no function in these samples" in under.stderr


def test_the_sampler_arms_the_process_by_its_module_not_by_a_word_of_its_path() -> None:
    # A checkout at /work/wt/intake41 made every process of its stack "the intake".
    path = Path(__file__).resolve().parents[2] / "services/devtools/cpu_sampler/sitecustomize.py"
    spec = importlib.util.spec_from_file_location("sampler_site", path)
    assert spec is not None and spec.loader is not None
    sampler = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sampler)
    root = "/work/wt/intake41/services"
    assert sampler._module(f"{root}/decider/__main__.py") == "decider"
    assert sampler._module(f"{root}/intake/__main__.py") == "intake"
    assert sampler._module(f"{root}/intake/kafka_intents.py") == "kafka_intents"
