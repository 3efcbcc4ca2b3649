"""Shared fixtures: a real `memfs serve` process per test.

server                      fixture: fresh server, --fault-control, api key "test-key"
start_server(tmp_path, …)   plain function, same thing without the fixture
ServerProc                  start/stop/kill/restart/set_faults/clear_faults/sdk
pg_cluster                  session fixture: a throwaway PostgreSQL cluster (tests/pg.py)
db_backend                  "sqlite" or "postgresql": the modules in BOTH_BACKENDS run every
                            test that uses `server` on both (a fresh PostgreSQL database each)
"""

from __future__ import annotations

import os
import pathlib
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import anthropic
import httpx
import pytest
from pg import PgCluster, pg_bin

from memfs.local.pids import wait_gone

REPO = pathlib.Path(__file__).resolve().parent.parent
LISTEN_PREFIX = "memfs serve: listening on "
START_TIMEOUT = 20.0

FAULTS_OFF = {
    "error_rate": 0.0,
    "error_status": 503,
    "rate_429": 0.0,
    "retry_after": 1.0,
    "latency": 0.0,
    "drop_rate": 0.0,
    "error_after_rate": 0.0,
}


@dataclass
class ServerProc:
    base_url: str  # "http://127.0.0.1:PORT"
    api_key: str | None
    db: pathlib.Path
    proc: subprocess.Popen
    extra_args: tuple[str, ...] = ()
    log_path: pathlib.Path | None = None
    port: int = 0
    db_url: str | None = None  # a postgresql:// URL instead of the SQLite file `db`
    _log_file: object = field(default=None, repr=False)

    # -- lifecycle ---------------------------------------------------------

    def _command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "memfs",
            "serve",
            "--db",
            self.db_url or str(self.db),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.extra_args,
        ]

    def start(self) -> None:
        """(Re)start on the same db and the same port (port 0 the first time)."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("server is already running")
        env = dict(os.environ)
        env.pop("MEMFS_SERVE_API_KEY", None)
        if self.api_key is not None:
            env["MEMFS_SERVE_API_KEY"] = self.api_key
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        if self.log_path is None:
            self.log_path = self.db.parent / "serve.log"
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _close_log
        self._close_log()
        self._log_file = log
        proc = subprocess.Popen(
            self._command(),
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            cwd=str(REPO),
            env=env,
        )
        self.proc = proc
        lines: queue.Queue[bytes] = queue.Queue()

        def pump() -> None:  # read the listening line, then keep the pipe drained
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(b"")

        threading.Thread(target=pump, daemon=True).start()
        try:
            line = lines.get(timeout=START_TIMEOUT).decode()
        except queue.Empty:
            self.kill()
            raise RuntimeError(f"memfs serve did not start in {START_TIMEOUT}s") from None
        if not line.startswith(LISTEN_PREFIX):
            self.kill()
            log_text = self.log_path.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"memfs serve failed to start: {line!r}\n{log_text}")
        self.base_url = line[len(LISTEN_PREFIX) :].strip()
        self.port = int(self.base_url.rsplit(":", 1)[1])

    def stop(self) -> None:
        """SIGTERM, wait, SIGKILL fallback."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
                if not wait_gone(proc.pid, 10):  # Popen.wait(timeout) polls every 50 ms
                    os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        self._close_log()

    def kill(self) -> None:
        """SIGKILL (simulate a crash)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        self._close_log()

    def restart(self) -> None:
        self.stop()
        self.start()

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None

    # -- helpers -------------------------------------------------------------

    def set_faults(self, **kw: float) -> None:
        """Change faults at runtime (server started with --fault-control)."""
        r = httpx.post(f"{self.base_url}/_memfs/faults", json=kw, timeout=10)
        r.raise_for_status()

    def clear_faults(self) -> None:
        self.set_faults(**FAULTS_OFF)

    def sdk(self, **kw: object) -> anthropic.Anthropic:
        """The official SDK pointed at this server (max_retries=0 unless given)."""
        kw.setdefault("max_retries", 0)
        kw.setdefault("api_key", self.api_key or "no-key")
        kw.setdefault("timeout", 30.0)
        return anthropic.Anthropic(base_url=self.base_url, **kw)  # type: ignore[arg-type]

    @property
    def headers(self) -> dict[str, str]:
        """Headers for raw httpx calls (auth + memory beta)."""
        h = {"anthropic-beta": "agent-memory-2026-07-22", "anthropic-version": "2023-06-01"}
        if self.api_key is not None:
            h["x-api-key"] = self.api_key
        return h


def start_server(
    tmp_path: pathlib.Path,
    *,
    api_key: str | None = None,
    extra_args: tuple[str, ...] = (),
    db_url: str | None = None,
    log_name: str = "serve.log",
) -> ServerProc:
    sp = ServerProc(
        base_url="",
        api_key=api_key,
        db=pathlib.Path(tmp_path) / "serve" / "memfs.db",
        proc=None,  # type: ignore[arg-type]
        extra_args=tuple(extra_args),
        log_path=pathlib.Path(tmp_path) / log_name,
        db_url=db_url,
    )
    pathlib.Path(tmp_path).mkdir(parents=True, exist_ok=True)
    sp.start()
    return sp


#: The server suite and the SDK conformance tests: every test of these modules that
#: uses the `server` fixture (or `db_backend`) runs on SQLite and on PostgreSQL.
BOTH_BACKENDS = {
    "test_server_http", "test_server_memories", "test_server_stores", "test_server_versions",
    "test_server_robustness", "test_server_gate", "test_server_hostile", "test_server_controls",
    "test_server_fuzz",
    "test_client_integration", "test_server_db", "test_server_sessions", "test_client_sessions",
    "test_server_limits", "test_server_metrics",
}


def pytest_generate_tests(metafunc):
    if "db_backend" in metafunc.fixturenames and \
            metafunc.module.__name__.rsplit(".", 1)[-1] in BOTH_BACKENDS:
        metafunc.parametrize("db_backend", ["sqlite", "postgresql"], indirect=True)


@pytest.fixture
def db_backend(request) -> str:
    return getattr(request, "param", "sqlite")


@pytest.fixture(scope="session")
def pg_cluster(tmp_path_factory) -> Iterator[PgCluster]:
    """One PostgreSQL cluster for the whole session (each test gets its own database).
    Skips when PostgreSQL is not installed, except under CI, which must run it."""
    if pg_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL binaries not found under CI (.ci/run installs postgresql)")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    import tempfile

    top = pathlib.Path(tempfile.mkdtemp(prefix="memfs-pg-"))
    cluster = PgCluster.start(top / "cluster")
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> str:
    """A fresh, empty PostgreSQL database."""
    return pg_cluster.new_database()


@pytest.fixture
def server(tmp_path: pathlib.Path, db_backend: str, request) -> Iterator[ServerProc]:
    db_url = request.getfixturevalue("pg_url") if db_backend == "postgresql" else None
    sp = start_server(tmp_path, api_key="test-key", extra_args=("--fault-control",),
                      db_url=db_url)
    try:
        yield sp
    finally:
        sp.stop()


from mountutil import mounts  # noqa: E402,F401 - the real-mount fixture, for every module


def pytest_collection_modifyitems(config, items):
    """Tests that make real FUSE mounts carry the `mount` marker (-m 'not mount' skips them)."""
    for item in items:
        if "mounts" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.mount)
