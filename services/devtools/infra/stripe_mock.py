"""stripe-mock (https://github.com/stripe/stripe-mock), Stripe's own mock of its API,
built from source with Go into the repo cache: the Stripe adapter's request and response
shapes are checked against it (tests/contract/test_stripe_mock_shapes.py). Stateless, it
ignores idempotency keys; the semantics are the stateful fake's (tests/support/
stripe_fake.py).

Everything Go writes (module cache, build cache, the binary) stays under .cache/go, so a
CI machine with Go and network access builds it on `make fetch` like the Kafka jars.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from services.devtools.infra._process import REPO_ROOT, InfraError

STRIPE_MOCK_VERSION = "v0.203.0"
GO_DIR = REPO_ROOT / ".cache" / "go"
BINARY = GO_DIR / "bin" / "stripe-mock"
# Written after `go install` succeeded, naming the version: a binary of another version
# (or a half-written one) is rebuilt.
MARKER = GO_DIR / f"stripe-mock-{STRIPE_MOCK_VERSION}.complete"
# Where Go is when it is not on PATH (the official tarball's place).
GO_FALLBACK = Path("/usr/local/go/bin/go")


def ensure_stripe_mock(*, quiet: bool = True) -> Path:
    if MARKER.exists() and BINARY.exists():
        return BINARY
    go = shutil.which("go") or (str(GO_FALLBACK) if GO_FALLBACK.exists() else None)
    if go is None:
        raise InfraError("Go (`go`) is needed to build stripe-mock; install Go 1.21 or later")
    GO_DIR.mkdir(parents=True, exist_ok=True)
    with (GO_DIR / "fetch.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not MARKER.exists():
            _install(go, quiet)
    return BINARY


def _install(go: str, quiet: bool) -> None:
    env = {
        **os.environ,
        "GOPATH": str(GO_DIR),
        "GOBIN": str(BINARY.parent),
        "GOMODCACHE": str(GO_DIR / "mod"),
        "GOCACHE": str(GO_DIR / "build"),
        # Module files writable, so `rm -rf .cache` works without chmod.
        "GOFLAGS": "-modcacherw",
    }
    result = subprocess.run(
        [go, "install", f"github.com/stripe/stripe-mock@{STRIPE_MOCK_VERSION}"],
        env=env,
        check=False,
        capture_output=quiet,
        text=True,
    )
    if result.returncode != 0:
        output = (result.stdout or "") + (result.stderr or "")
        raise InfraError(f"building stripe-mock failed ({result.returncode}):\n{output}")
    MARKER.write_text(f"stripe-mock {STRIPE_MOCK_VERSION}\n")
