"""A Docker engine and base image for the checks that build recon's images (`make image-test`,
`make compose-test`, `make compose-images`), on machines where no registry is reachable.

`engine()` uses the engine the environment points at (DOCKER_HOST, or the default socket)
when one answers; otherwise it starts Debian's `dockerd` of its own, on a socket under
.cache/docker, with `--iptables=false --bridge=none`: containers share the host's network, so
nothing needs a bridge, NAT or an address off loopback. A dockerd left over from an
interrupted run (found by its pid file, and only if its command line names our socket) is
stopped first.

`local_base()` makes the base image here, once per engine: a Debian root file system from
`debootstrap --variant=minbase` (Python 3.11, its venv module, the CA bundle), with this host's
trust store (a TLS-inspecting proxy's CA reaches pip, uv and apt through it), brought in with
`docker import`.

Every build uses the classic builder: BuildKit needs the buildx plugin, which Debian's
docker.io lacks (and a `docker` client found first on PATH may have none either).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from services.devtools.infra._process import REPO_ROOT

CACHE = REPO_ROOT / ".cache" / "docker"
LOCAL_BASE = "recon-base:bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
ENGINE_START_S = 90.0
# Cold, on a loaded 2-core machine, debootstrap took about 5 minutes.
DEBOOTSTRAP_S = 900.0
BUILD_S = 900.0


class DockerError(RuntimeError):
    pass


def classic_builder_env() -> dict[str, str]:
    """The environment for `docker build` and `docker-compose build`: the classic builder,
    and docker-compose building through its own client (not `docker`'s, which may lack buildx)."""
    return {**os.environ, "DOCKER_BUILDKIT": "0", "COMPOSE_DOCKER_CLI_BUILD": "0"}


def docker(*args: str, timeout: float = 120.0) -> str:
    """Run `docker ARGS`; its output, or DockerError with what it printed."""
    try:
        result = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise DockerError(f"docker {' '.join(args[:3])} did not finish in {timeout:.0f} s") from exc
    if result.returncode != 0:
        raise DockerError(f"docker {' '.join(args[:3])} failed:\n{result.stderr}")
    return result.stdout


def _answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def image_exists(name: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", name], capture_output=True).returncode == 0


@contextmanager
def engine(*, start: bool | None = None) -> Iterator[None]:
    """A Docker engine for the length of the block: the one the environment names if it
    answers (start=None), else, or with start=True, a dockerd of our own."""
    if start is None:
        start = not _answers()
    if not start:
        yield
        return
    if shutil.which("dockerd") is None:
        raise DockerError("no Docker engine answers, and no dockerd: apt-get install docker.io")
    root = CACHE
    root.mkdir(parents=True, exist_ok=True)
    socket = root / "docker.sock"
    pidfile = root / "docker.pid"
    _stop_leftover(pidfile, socket)
    cmd = ["dockerd", "--iptables=false", "--ip6tables=false", "--bridge=none"]
    cmd += ["-H", f"unix://{socket}", "--data-root", str(root / "data")]
    cmd += ["--exec-root", str(root / "exec"), "--pidfile", str(pidfile)]
    log_path = root / "dockerd.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    previous = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = f"unix://{socket}"
    try:
        deadline = time.monotonic() + ENGINE_START_S
        while not _answers():
            if process.poll() is not None or time.monotonic() > deadline:
                raise DockerError(
                    f"dockerd did not answer within {ENGINE_START_S:.0f} s; see {log_path}"
                )
            time.sleep(0.5)
        yield
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        # dockerd leaves its own network namespace mounted under the exec root when it
        # stops; left there, the checkout cannot be deleted ("Device or resource busy").
        netns = root / "exec" / "netns" / "default"
        if os.path.ismount(netns):
            subprocess.run(["umount", str(netns)], capture_output=True, check=False)
        if previous is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = previous


def _stop_leftover(pidfile: Path, socket: Path) -> None:
    """Stop a dockerd an interrupted run left on our socket: it holds the data root's lock."""
    try:
        pid = int(pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError):
        return
    if "dockerd" not in cmdline or str(socket) not in cmdline:
        return
    print(f"stopping dockerd {pid} left by an earlier run", flush=True)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.5)


def local_base() -> str:
    """The base image made here (debootstrap + docker import), skipped when the engine has it."""
    if image_exists(LOCAL_BASE):
        return LOCAL_BASE
    if shutil.which("debootstrap") is None:
        raise DockerError("the local base image needs debootstrap: apt-get install debootstrap")
    rootfs = CACHE / "rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    cmd = ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates"]
    cmd += ["bookworm", str(rootfs), DEBIAN_MIRROR]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=DEBOOTSTRAP_S)
    except subprocess.TimeoutExpired as exc:
        raise DockerError(f"debootstrap did not finish in {DEBOOTSTRAP_S:.0f} s") from exc
    if result.returncode != 0:
        log = rootfs / "debootstrap" / "debootstrap.log"
        detail = log.read_text(errors="replace")[-3000:] if log.exists() else result.stderr
        raise DockerError(f"debootstrap failed ({result.returncode}):\n{detail}")
    shutil.copy("/etc/ssl/certs/ca-certificates.crt", rootfs / "etc/ssl/certs/ca-certificates.crt")
    # Packages installed later (docker build's apt-get) need no recommends, and fetch from the
    # same mirror debootstrap used; the image's apt lists are left empty to keep it small.
    (rootfs / "etc/apt/apt.conf.d/90recon").write_text(
        'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n'
    )
    shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
    (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imported = subprocess.run(
        ["docker", "import", "-", LOCAL_BASE], stdin=tar.stdout, capture_output=True, text=True
    )
    tar.wait()
    shutil.rmtree(rootfs, ignore_errors=True)
    if imported.returncode != 0:
        raise DockerError(f"docker import of the base failed:\n{imported.stderr}")
    return LOCAL_BASE


def build(tag: str, dockerfile: Path, context: Path, build_args: dict[str, str]) -> None:
    """`docker build` with the classic builder on the host's network (pip and apt reach
    their registries as the host does); its output goes to the terminal."""
    cmd = ["docker", "build", "--network", "host", "-f", str(dockerfile), "-t", tag]
    for key, value in build_args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    cmd.append(str(context))
    try:
        result = subprocess.run(cmd, env=classic_builder_env(), timeout=BUILD_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise DockerError(f"building {tag} did not finish in {BUILD_S:.0f} s") from exc
    if result.returncode != 0:
        raise DockerError(f"building {tag} failed ({result.returncode}); its output is above")
