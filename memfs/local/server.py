"""The embedded local server that `memfs mount` uses when no server is configured.

It is an ordinary `memfs serve` process on 127.0.0.1 with its database under
``$XDG_DATA_HOME/memfs/`` (default ``~/.local/share/memfs``), started on first
use and left running for later mounts; ``local-server.json`` beside the
database records its URL and pid. Loopback is open to every local user, so
the server requires a random key kept in ``local-server.key`` (0600): only
the user who owns the data directory can read the stores.

Three things make this safe to share a machine with other users and with
other memfs commands:

* **The health check cannot be fooled.** Before anything is sent to the
  recorded URL with the key, the server must answer a fresh random challenge
  with HMAC(key, challenge) (``/_memfs/health?challenge=…``). Another local
  process that took the port after the server died cannot answer it, so it
  never sees the key; a new server is started instead.
* **One start at a time.** Starting happens under an exclusive ``flock`` on
  ``local-server.lock``, and the check is repeated once the lock is held: two
  commands racing to start it start one.
* **Bounded logs.** The server logs to ``local-server.log`` itself, rotated by
  size (``--log-file``); only output from before its logging is set up goes to
  ``local-server.stderr``, truncated at each start.

``memfs serve stop`` and ``memfs serve status`` use :func:`stop` and
:func:`status`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from memfs.api import tls
from memfs.core.private import private_dir
from memfs.local.pids import alive, wait_gone

START_TIMEOUT = 30.0
LOG_MAX_BYTES = 5 * 1024 * 1024
LOG_BACKUPS = 2


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return private_dir(Path(base) / "memfs")


def api_key() -> str:
    """The embedded server's key, created on first use (0600, never in argv). Two
    commands creating it at once agree: the key is linked into place only if absent."""
    path = data_dir() / "local-server.key"
    for _ in range(3):
        try:
            key = path.read_text().strip()
        except FileNotFoundError:
            key = ""
        if key:
            return key
        tmp = path.with_name(f".local-server.key.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("memfs-local-" + secrets.token_urlsafe(32) + "\n")
        try:
            if path.exists():  # empty: replace it
                os.replace(tmp, path)
            else:
                os.link(tmp, path)  # fails if another command got there first: use theirs
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    raise RuntimeError(f"{path}: cannot create the local server's key")


def verify(url: str, key: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """The health document of the server at ``url`` if it proves it holds ``key``;
    None for anything else (nothing listening, another program, a wrong proof)."""
    from memfs.core.healthproof import health_proof

    challenge = secrets.token_hex(16)
    try:
        r = httpx.get(f"{url}/_memfs/health", params={"challenge": challenge}, timeout=timeout,
                      verify=tls.verify())  # the context prepared, if the process did
        doc = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("proof"), str):
        return None
    if not hmac.compare_digest(doc["proof"], health_proof(key, challenge)):
        return None
    return doc


def _read_info() -> dict[str, Any] | None:
    try:
        info = json.loads((data_dir() / "local-server.json").read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and isinstance(info.get("url"), str) else None


def _write_info(info: dict[str, Any]) -> None:
    path = data_dir() / "local-server.json"
    tmp = path.with_suffix(".json.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(info))
    os.replace(tmp, path)


def recorded_url() -> str | None:
    """The URL local-server.json records (not verified: a cheap look at a file)."""
    info = _read_info()
    return info["url"] if info else None


def running_url() -> str | None:
    """URL of our running embedded server (verified), or None."""
    info = _read_info()
    if info is None:
        return None
    return info["url"] if verify(info["url"], api_key()) else None


async def located() -> str | None:
    """Where our embedded server runs now (verified to hold our key: the key is never
    sent to a stranger on the recorded port), for a long-lived command's client that
    cannot reach it where it was (`MemoryStoresClient(locate=located)`); None when it
    is not running."""
    import anyio

    return await anyio.to_thread.run_sync(running_url)


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    """Exclusive lock for starting and stopping (blocks while another command holds it)."""
    fd = os.open(data_dir() / "local-server.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _start(key: str) -> str:
    directory = data_dir()
    stderr_path = directory / "local-server.stderr"
    fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.fdopen(fd, "wb")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "memfs", "serve", "--db", str(directory / "local.db"),
             "--port", "0", "--log-file", str(directory / "local-server.log"),
             "--log-max-bytes", str(LOG_MAX_BYTES), "--log-backups", str(LOG_BACKUPS)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
            start_new_session=True, env={**os.environ, "MEMFS_SERVE_API_KEY": key},
        )
    finally:
        err.close()
    assert proc.stdout is not None
    line = proc.stdout.readline().decode(errors="replace").strip()
    proc.stdout.close()
    if "listening on " not in line:
        raise RuntimeError(f"the embedded server did not start (see {stderr_path} and "
                           f"{directory}/local-server.log)")
    url = line.split("listening on ", 1)[1]
    doc = verify(url, key, timeout=START_TIMEOUT)
    if doc is None:
        proc.terminate()
        raise RuntimeError(f"the embedded server at {url} did not pass its health check")
    _write_info({"url": url, "pid": proc.pid, "server_id": doc.get("server_id"),
                 "started_at": time.time()})
    return url


def ensure_local_server() -> tuple[str, str]:
    """(base URL, API key) of the embedded server, starting it when it is not running."""
    key = api_key()
    url = running_url()
    if url:
        return url, key
    with _lock():
        key = api_key()
        url = running_url()  # another command may have started it while we waited
        if url:
            return url, key
        # A recorded server of ours that fails the proof (an older memfs without it,
        # or hung) would otherwise keep running beside the new one on the same
        # database: end it first. Only a `memfs serve` on our own database qualifies.
        info = _read_info() or {}
        pid = info.get("pid")
        if isinstance(pid, int) and alive(pid) and _is_our_server(pid):
            _terminate(pid, 10.0)
        return _start(key), key


def _is_our_server(pid: int) -> bool:
    """Is ``pid`` a `memfs serve` on our database (not a reused pid)?"""
    from memfs.local.titles import is_serve_of

    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return is_serve_of(cmdline, str(data_dir() / "local.db"))  # its title, or its argv


def _terminate(pid: int, timeout: float) -> bool:
    """SIGTERM, wait up to ``timeout``, then SIGKILL; True if it stopped by itself."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not wait_gone(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return False
    return True


class InUse(Exception):
    """Live mounts use the embedded server: stopping it would leave them offline."""

    def __init__(self, url: str, mountpoints: list[str]) -> None:
        super().__init__(url, mountpoints)
        self.url, self.mountpoints = url, mountpoints


def mounts_using(url: str) -> list[str]:
    """The mountpoints of live memfs mounts (the mount registry, daemons alive) on the
    embedded server: started on it, or registered at its URL."""
    from memfs.local.registry import registry_dir

    out = []
    for f in sorted(registry_dir().glob("*.json")):
        try:
            entry = json.loads(f.read_text())
            pid, point = int(entry["pid"]), str(entry["mountpoint"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if (entry.get("embedded") or entry.get("base_url") == url) and alive(pid):
            out.append(point)
    return out


def stop(timeout: float = 10.0, *, force: bool = False) -> str:
    """Stop the embedded server (SIGTERM: it finishes what is in flight); what happened.
    Refused (:class:`InUse`) while live mounts use it, unless `force`."""
    with _lock():
        info = _read_info()
        if info is None:
            return "not running"
        pid = info.get("pid")
        path = data_dir() / "local-server.json"
        if not isinstance(pid, int) or not alive(pid) or not _is_our_server(pid):
            path.unlink(missing_ok=True)
            return "not running (removed a stale record)"
        users = mounts_using(info["url"])
        if users and not force:
            raise InUse(info["url"], users)
        graceful = _terminate(pid, timeout)
        path.unlink(missing_ok=True)
        if not graceful:
            return f"killed pid {pid} (it did not stop within {timeout:g}s)"
        return f"stopped (pid {pid})"


def status() -> dict[str, Any]:
    """Whether the embedded server runs (verified), and where its files are."""
    directory = data_dir()
    info = _read_info() or {}
    doc = verify(info["url"], api_key()) if info.get("url") else None
    return {
        "running": doc is not None,
        "url": info.get("url") if doc else None,
        "pid": info.get("pid") if doc else None,
        "server_id": doc.get("server_id") if doc else None,
        "db": str(directory / "local.db"),
        "log": str(directory / "local-server.log"),
    }
