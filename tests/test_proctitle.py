"""Process titles of a real mount daemon and a real `memfs serve` (/proc/PID/cmdline)."""

from __future__ import annotations

import pathlib
import time

from conftest import start_server
from mountutil import needs_fuse

from memfs.local.titles import mount_title, safe_db, serve_title


def cmdline(pid: int) -> str:
    return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()


def wait_title(pid: int, want: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        title = cmdline(pid)
        if want in title:
            return title
        if time.monotonic() > deadline:
            raise AssertionError(f"title {title!r} never showed {want!r}")
        time.sleep(0.1)


def test_safe_db() -> None:
    assert safe_db("/var/lib/memfs.db") == "/var/lib/memfs.db"
    assert safe_db("postgresql://me:s3cret@db:5432/memfs?password=x") == \
        "postgresql://me@db:5432/memfs"
    assert serve_title("x.db", "http://h:1") == "memfs serve: x.db on http://h:1"
    # A store's name comes from the server: no terminal escape reaches `ps`.
    assert mount_title("evil\x1b]0;owned\x07" + "n" * 100, "/m", "online") == \
        "memfs: evil\\x1b]0;owned\\x07" + "n" * 60 + "… on /m (online)"


def test_serve_title(tmp_path) -> None:
    sp = start_server(tmp_path, api_key="very-secret-key")
    try:
        title = wait_title(sp.proc.pid, "memfs serve:")
        assert title == f"memfs serve: {sp.db} on {sp.base_url}"
        assert "very-secret-key" not in title
    finally:
        sp.stop()


@needs_fuse
def test_daemon_title_follows_state(server, mounts) -> None:
    store = mounts.new_store("Title Store")
    m = mounts.mount(store)
    title = wait_title(m.pid, "(online)")
    assert title == f"memfs: Title Store on {m.path} (online)"
    server.set_faults(error_rate=1.0)
    try:
        wait_title(m.pid, f"memfs: Title Store on {m.path} (offline)")
    finally:
        server.clear_faults()
    wait_title(m.pid, "(online)")
    m.unmount()
