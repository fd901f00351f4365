"""Prometheus's promtool, built from source with Go into the repo cache
(services.devtools.infra.go_tools): the tests run `promtool check rules` and `promtool test
rules` over compose/prometheus/alerts.yml (tests/alerts/), so every alert expression is
evaluated over series histories like the ones recon exports, not only read.

The version is the newest the Go module proxy served that `go install` takes with this
machine's Go (the module v0.316.0 is Prometheus 3.16.0; the compose stack's Prometheus
image is older, v3.5.0, which has every function and operator these rules use). Building it
cold takes minutes of CPU (docs/testing.md, "Alert rules"); the binary is cached.
"""

from __future__ import annotations

from pathlib import Path

from services.devtools.infra.go_tools import GoTool, ensure_go_tool

PROMTOOL = GoTool(
    "promtool",
    "github.com/prometheus/prometheus/cmd/promtool",
    "v0.316.0",
    go="1.26.7",
    # Without the service discoveries (Azure, GCE, Kubernetes, ...: Prometheus's own build
    # tag): the rules and the compose configuration use none (static targets), and they
    # were most of the build: 245 s of CPU and 1.8 GB of .cache/go instead of 589 s and
    # 3.6 GB (docs/testing.md, "Alert rules").
    tags=("remove_all_sd",),
)


def ensure_promtool(*, quiet: bool = True) -> Path:
    return ensure_go_tool(PROMTOOL, quiet=quiet)
