"""Debian's Chromium for the console's browser tests (tests/browser/), installed by
`make fetch` like the Kafka jars and stripe-mock.

Playwright's own browser download cannot be used: nothing outside the package registries is
reachable here, CI included. Debian's `chromium` package is, and Playwright drives it
through `executable_path` (tests/browser/browser.py). CI runs as root on Debian, so
`apt-get install` works there as it does on a developer's machine; elsewhere (no apt-get,
not root) the error says what to install by hand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from services.devtools.infra._process import InfraError

CHROMIUM = Path("/usr/bin/chromium")
# Headless in a container: no sandbox (root has none to drop into), no GPU, and nothing
# that reaches the network on its own (updates, sync, component downloads).
LAUNCH_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def ensure_chromium(*, quiet: bool = True) -> Path:
    if CHROMIUM.exists():
        return CHROMIUM
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise InfraError(
            f"the browser tests need Chromium at {CHROMIUM}: install Debian's `chromium` "
            "package (apt-get install chromium) as root"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in ([apt, "update"], [apt, "install", "-y", "--no-install-recommends", "chromium"]):
        result = subprocess.run(step, env=env, check=False, capture_output=quiet, text=True)
        if result.returncode != 0:
            output = (result.stdout or "") + (result.stderr or "")
            raise InfraError(f"{' '.join(step)} failed ({result.returncode}):\n{output}")
    if not CHROMIUM.exists():
        raise InfraError(f"apt-get installed chromium, but {CHROMIUM} is not there")
    return CHROMIUM
