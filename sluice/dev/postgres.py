"""A throwaway PostgreSQL server for the integration tests and `sluice dev cluster`, from Debian's PostgreSQL binaries.

``initdb`` into a fresh temporary folder, trust authentication, listening on 127.0.0.1 at a free
port and on a unix socket inside that folder. PostgreSQL refuses to run as root, so when the
tests run as root the server runs as the ``postgres`` (or ``nobody``) user through ``runuser``.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sluice.dev import free_port

SUPERUSER = "sluice"
MISSING_REASON = "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin"


def find_bin_dir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl`` (the newest installed version), or None."""
    on_path = shutil.which("pg_ctl")
    candidates = [Path(on_path).resolve().parent] if on_path else []
    installed = [Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin") if Path(p).parent.name.isdigit()]
    candidates += sorted(installed, key=lambda p: int(p.parent.name), reverse=True)
    for folder in candidates:
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    return None


@contextmanager
def postgres_server(bin_dir: Path) -> Iterator[str]:
    """Run a server for the duration of the block; yields its ``postgresql+psycopg://`` URI."""
    home = Path(tempfile.mkdtemp(prefix="sluice-pg-"))
    data, log = home / "data", home / "server.log"
    port = free_port()
    run_as = _server_user()
    if run_as is not None:
        account = pwd.getpwnam(run_as)
        os.chown(home, account.pw_uid, account.pw_gid)
    try:
        _run(run_as, [bin_dir / "initdb", "-D", data, "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync"])
        options = f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        _run(run_as, [bin_dir / "pg_ctl", "-D", data, "-l", log, "-o", options, "-w", "-t", "60", "start"], log)
        try:
            yield f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{port}/postgres"
        finally:
            _run(run_as, [bin_dir / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"], log)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def fresh_database(server_uri: str) -> str:
    """Create an empty database on the server and return its URI (one per test keeps tests apart)."""
    import psycopg  # the tests' (psycopg is in the test extra)

    name = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_uri.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server_uri.rsplit("/", 1)[0] + f"/{name}"


def _server_user() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root, but neither a 'postgres' nor a 'nobody' user exists to run PostgreSQL as")


def _run(run_as: str | None, command: list[object], log: Path | None = None) -> None:
    argv = [str(part) for part in command]
    if run_as is not None:
        argv = ["runuser", "-u", run_as, "--", *argv]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        server_log = log.read_text() if log is not None and log.exists() else ""
        output = f"{result.stdout}{result.stderr}{server_log}"
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n{output}")
