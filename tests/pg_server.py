"""A throwaway PostgreSQL server for tests: initdb in a temporary folder, on a free local port.

Debian's ``postgresql`` package provides the binaries (``.ci/run`` installs it). initdb
refuses to run as root, so as root the server runs as the ``postgres`` user the package
creates. :func:`postgres_server` yields a SQLAlchemy URL and stops the server afterwards;
:func:`unavailable_reason` says why a server cannot be had here (the test then skips).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def unavailable_reason() -> str | None:
    """Why no test server can start here, or ``None`` when one can."""
    if _bin_dir() is None:
        return "PostgreSQL is not installed (apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (pip install 'psycopg[binary]')"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_server_user(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a fresh server; yield ``postgresql://postgres@127.0.0.1:PORT/postgres``."""
    bin_dir = _bin_dir()
    assert bin_dir is not None, unavailable_reason()
    root = Path(tempfile.mkdtemp(prefix="autopart-pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        for path in (root, sockets):
            os.chown(path, user.pw_uid, user.pw_gid)
    port = _free_port()
    quiet = {"check": True, "capture_output": True, "timeout": 120}
    try:
        subprocess.run(
            _as_server_user(
                [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"]
            ),
            **quiet,
        )
        options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c max_connections=50"
        log = root / "server.log"  # pg_ctl's server keeps its output open: not a pipe
        subprocess.run(
            _as_server_user(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(log),
                    "-w",
                    "start",
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run(
                _as_server_user(
                    [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]
                ),
                capture_output=True,
                timeout=120,
                check=False,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
