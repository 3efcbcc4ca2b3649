"""The embedded local server that `memfs mount` uses when no server is configured.

It is an ordinary `memfs serve` process on 127.0.0.1 with its database under
``$XDG_DATA_HOME/memfs/`` (default ``~/.local/share/memfs``), started on first
use and left running for later mounts; ``local-server.json`` beside the
database records its port and pid. Loopback is open to every local user, so
the server requires a random key kept in ``local-server.key`` (0600): only
the user who owns the data directory can read the stores.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    path = Path(base) / "memfs"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/_memfs/health", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def api_key() -> str:
    """The embedded server's key, created on first use (0600, never in argv)."""
    path = data_dir() / "local-server.key"
    try:
        key = path.read_text().strip()
    except FileNotFoundError:
        key = ""
    if not key:
        key = "memfs-local-" + secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key + "\n")
    return key


def running_url() -> str | None:
    info_path = data_dir() / "local-server.json"
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError):
        return None
    url = info.get("url")
    return url if url and _healthy(url) else None


def ensure_local_server() -> tuple[str, str]:
    """(base URL, API key) of the embedded server, starting it when it is not running."""
    key = api_key()
    url = running_url()
    if url:
        return url, key
    directory = data_dir()
    log = open(directory / "local-server.log", "ab")  # noqa: SIM115 - handed to the child
    os.chmod(directory / "local-server.log", 0o600)
    proc = subprocess.Popen(
        [sys.executable, "-m", "memfs", "serve", "--db", str(directory / "local.db"),
         "--port", "0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
        start_new_session=True, env={**os.environ, "MEMFS_SERVE_API_KEY": key},
    )
    log.close()
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    proc.stdout.close()
    if "listening on " not in line:
        raise RuntimeError(f"the embedded server did not start (see {directory}/local-server.log)")
    url = line.split("listening on ", 1)[1]
    info = {"url": url, "pid": proc.pid, "started_at": time.time()}
    info_path = directory / "local-server.json"
    info_path.write_text(json.dumps(info))
    os.chmod(info_path, 0o600)
    return url, key
