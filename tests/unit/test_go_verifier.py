"""The verifier that is not recon (verifier-go/: Go's standard library, its own JCS) passes
its own `go test` over the published vectors (docs/vectors/), and its command line gives
the verdicts recon gives. Go is on every machine of the project's kind (the Stripe fake is
built with it too)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

from services.devtools.audit_vectors import VECTORS
from services.devtools.infra._process import REPO_ROOT

VERIFIER = REPO_ROOT / "verifier-go"


def _go(*args: str) -> subprocess.CompletedProcess[str]:
    go = shutil.which("go")
    assert go, "Go is needed for verifier-go/ (https://go.dev/doc/install)"
    # GOTOOLCHAIN=local: never download another toolchain; the module needs none.
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    return subprocess.run(
        [go, *args], cwd=VERIFIER, env=env, capture_output=True, text=True, timeout=300
    )


def test_go_test_passes_over_the_vectors() -> None:
    run = _go("test", "-count=1", "./...")
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_go_command_line_gives_recon_s_verdicts_and_exit_codes(tmp_path: Path) -> None:
    binary = tmp_path / "verify-bundle"
    built = _go("build", "-o", str(binary), ".")  # `go run` would turn every exit code into 1
    assert built.returncode == 0, built.stderr
    expected = json.loads((VECTORS / "bundles" / "expected.json").read_text())
    keys = str(VECTORS / "bundles" / "keys.json")
    for name, code in (("valid", 0), ("tampered-payload", 1), ("unknown-key", 3)):
        bundle = str(VECTORS / "bundles" / f"{name}.json")
        run = subprocess.run(
            [binary, "-keys", keys, bundle], capture_output=True, text=True, timeout=60
        )
        assert run.returncode == code, run.stdout + run.stderr
        assert json.loads(run.stdout)["verdict"] == expected[name]["verdict"]
