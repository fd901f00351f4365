"""Tools written in Go that the tests run, built from source with `go install` into the
repo cache: stripe-mock (services.devtools.infra.stripe_mock) and promtool
(services.devtools.infra.promtool). No prebuilt binary can be downloaded here, CI
included; the Go module proxy can be reached, so `go install module@version` is how a
fresh machine gets them, on `make fetch` like the Kafka jars, or on a test's first use.

Everything Go writes (module cache, build cache, the binaries) stays under .cache/go, so a
second run finds the binary and builds nothing.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from services.devtools.infra._process import REPO_ROOT, InfraError

GO_DIR = REPO_ROOT / ".cache" / "go"
# Where Go is when it is not on PATH (the official tarball's place).
GO_FALLBACK = Path("/usr/local/go/bin/go")


@dataclass(frozen=True)
class GoTool:
    # The binary's name, as `go install` names it after the package's last element.
    name: str
    # The package to install, without the version.
    package: str
    version: str
    # The oldest Go that builds this version (its module's `go` line): said when Go is
    # missing; an older one fails `go install` with its own message.
    go: str
    # Build tags: what the tool can be built without.
    tags: tuple[str, ...] = ()

    @property
    def binary(self) -> Path:
        return GO_DIR / "bin" / self.name

    @property
    def marker(self) -> Path:
        # Written after `go install` succeeded, naming the version: a binary of another
        # version (or a half-written one, the install killed) is built again.
        return GO_DIR / f"{self.name}-{self.version}.complete"


def ensure_go_tool(tool: GoTool, *, quiet: bool = True) -> Path:
    """The tool's binary, built first when this version's marker is missing."""
    if tool.marker.exists() and tool.binary.exists():
        return tool.binary
    go = shutil.which("go") or (str(GO_FALLBACK) if GO_FALLBACK.exists() else None)
    if go is None:
        raise InfraError(
            f"Go (`go`) is needed to build {tool.name} {tool.version}; install Go {tool.go}"
            " or later"
        )
    GO_DIR.mkdir(parents=True, exist_ok=True)
    # One lock for every tool: two pytest workers (or `make fetch` beside a test) that
    # need a tool at once build it once, and share the module and build caches.
    with (GO_DIR / "fetch.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (tool.marker.exists() and tool.binary.exists()):
            _install(go, tool, quiet)
    return tool.binary


def _install(go: str, tool: GoTool, quiet: bool) -> None:
    env = {
        **os.environ,
        "GOPATH": str(GO_DIR),
        "GOBIN": str(tool.binary.parent),
        "GOMODCACHE": str(GO_DIR / "mod"),
        "GOCACHE": str(GO_DIR / "build"),
        # Module files writable, so `rm -rf .cache` works without chmod.
        "GOFLAGS": "-modcacherw",
    }
    result = subprocess.run(
        [go, "install", *_tags(tool), f"{tool.package}@{tool.version}"],
        env=env,
        check=False,
        capture_output=quiet,
        text=True,
    )
    if result.returncode != 0:
        output = (result.stdout or "") + (result.stderr or "")
        raise InfraError(f"building {tool.name} failed ({result.returncode}):\n{output}")
    tool.marker.write_text(f"{tool.name} {tool.version}\n")


def _tags(tool: GoTool) -> list[str]:
    return ["-tags", ",".join(tool.tags)] if tool.tags else []
