"""Real mounts: state survives an embedded-server restart on a new port (defect 9 of
issue 7), older URL-keyed state is adopted, and `memfs status` / `memfs conflicts` find an
unmounted --cache-dir mount (defect 12)."""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anthropic
import pytest
from gate import Gate
from mountutil import MountProc, needs_fuse, server_memories

from memfs.state import statedir

pytestmark = [needs_fuse, pytest.mark.mount]

# `--lost-answer-wait 1`: these tests kill or stop the server under a live mount; a request
# the kill cut short is in doubt, and would wait the default 30 s before it is sent again.
FAST = ("--write-back-delay", "0.1", "--poll-interval", "1", "--delete-delay", "1",
        "--lost-answer-wait", "1")


def _wait(pred, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _kill9(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    _wait(lambda: not _alive(pid), 20, f"pid {pid} to die")


def _state_dbs(root: Path, store: str) -> list[Path]:
    return sorted(p.parent for p in root.glob(f"*/{store}/state.db"))


class Embedded:
    """The embedded local server as `memfs` starts it (no ANTHROPIC_BASE_URL), every
    instance killed by its pid at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
        self.env.update({"XDG_DATA_HOME": str(tmp_path / "data"),
                         "XDG_CACHE_HOME": str(tmp_path / "cache"),
                         "MEMFS_LOG_LEVEL": "DEBUG"})
        self.data = tmp_path / "data" / "memfs"
        self.cache = tmp_path / "cache" / "memfs"
        self.pids: set[int] = set()

    def info(self) -> dict:
        info = json.loads((self.data / "local-server.json").read_text())
        self.pids.add(int(info["pid"]))
        return info

    def sdk(self) -> anthropic.Anthropic:
        key = (self.data / "local-server.key").read_text().strip()
        return anthropic.Anthropic(base_url=self.info()["url"], api_key=key, max_retries=0)

    def cleanup(self) -> None:
        try:
            self.info()
        except (OSError, ValueError):
            pass
        for pid in self.pids:
            _kill9(pid)


@pytest.fixture
def embedded(tmp_path):
    e = Embedded(tmp_path)
    try:
        yield e
    finally:
        e.cleanup()


def test_pending_change_survives_embedded_server_restart_on_a_new_port(embedded, tmp_path):
    """Issue 7, defect 9, exactly: kill -9 the embedded server, write, unmount (1 left),
    mount again (a new server on a new port): the change is there and goes out. (The
    create the unmount's flush sent may have met a connection to the killed server, and
    so be in doubt: the new daemon waits `--lost-answer-wait`, 1 s in FAST, before
    taking it as never applied.)"""
    path = tmp_path / "mnt"
    path.mkdir()
    m = MountProc(path, "", embedded.env, FAST)
    try:
        store = m.memfs("stores", "create", "emb").stdout.strip().splitlines()[-1]
        m.store_id = store
        first = embedded.info()
        m.mount()
        state_dir = m.state_dir
        assert state_dir.parent.name.startswith("srv-"), state_dir
        (path / "a.md").write_text("one\n")
        m.wait_synced()

        _kill9(first["pid"])
        (path / "b.md").write_text("two\n")
        out = m.unmount("--timeout", "2", kept=True)
        assert "1 left" in out, out

        m.mount()  # starts a new embedded server on a new port
        second = embedded.info()
        assert second["pid"] != first["pid"]
        assert m.state_dir == state_dir  # the same state, whatever the port
        assert _state_dbs(embedded.cache, store) == [state_dir]
        assert sorted(p.name for p in path.iterdir()) == ["a.md", "b.md"]
        assert (path / "b.md").read_text() == "two\n"
        m.wait_synced()
        st = m.status()
        assert st["server"] == second["url"]
        assert not any(st["pending"][k] for k in ("creates", "updates", "renames", "deletes"))
        assert st["conflicts"] == []
        memories = {x.path: x.content for x in embedded.sdk().beta.memory_stores.memories.list(
            store, view="full", limit=20)}
        assert memories == {"/a.md": "one\n", "/b.md": "two\n"}
        assert "0 left" in m.unmount()
    finally:
        m.cleanup()


def test_a_live_mount_follows_the_embedded_server_to_its_new_port(embedded, tmp_path):
    """The embedded server dies and another memfs command starts it again on a new
    port: the mounted daemon finds it (it proves it holds our key) and pushes what was
    written meanwhile, with no remount."""
    path = tmp_path / "mnt"
    path.mkdir()
    m = MountProc(path, "", embedded.env, FAST)
    try:
        store = m.memfs("stores", "create", "emb").stdout.strip().splitlines()[-1]
        m.store_id = store
        first = embedded.info()
        m.mount()
        (path / "a.md").write_text("one\n")
        m.wait_synced()
        _kill9(first["pid"])
        (path / "b.md").write_text("written while the server was down\n")
        _wait(lambda: m.live_status()["online"] is False, 30, "the mount to notice")
        m.memfs("stores", "list")  # any command starts the embedded server again
        second = embedded.info()
        assert second["url"] != first["url"]
        m.wait_synced(timeout=60)
        st = m.status()
        assert st["online"] and st["server"] == second["url"]
        memories = {x.path: x.content for x in embedded.sdk().beta.memory_stores.memories.list(
            store, view="full", limit=20)}
        assert memories == {"/a.md": "one\n", "/b.md": "written while the server was down\n"}
    finally:
        m.cleanup()


def test_url_keyed_state_of_an_older_memfs_is_adopted(mounts, server, tmp_path):
    """State kept under the URL-derived key (as memfs did before server ids) is moved into
    place at the next mount: its pending change is not stranded. (A create the unmount's
    flush sent as the server stopped may be in doubt: `--lost-answer-wait 1`.)"""
    store = mounts.new_store()
    m = mounts.mount(store, "--lost-answer-wait", "1")
    (m.path / "a.md").write_text("one\n")
    m.wait_synced()
    server.stop()
    (m.path / "b.md").write_text("two\n")
    assert "1 left" in m.unmount("--timeout", "1", kept=True)
    # What an older memfs left behind: the same state under host-port.
    new_dir = m.state_dir
    old_dir = new_dir.parent.parent / statedir.server_id(server.base_url) / store
    old_dir.parent.mkdir(mode=0o700)
    os.rename(new_dir, old_dir)

    server.port = 0  # back on a new port
    server.start()
    m.env["ANTHROPIC_BASE_URL"] = server.base_url
    proc = m.mount()
    assert "adopted 1 pending change(s) from an earlier state directory" in proc.stderr
    assert m.state_dir == new_dir and not old_dir.exists()
    assert (m.path / "b.md").read_text() == "two\n"
    m.wait_synced()
    assert server_memories(server, store) == {"/a.md": "one\n", "/b.md": "two\n"}


def test_status_and_conflicts_find_an_unmounted_cache_dir_mount(mounts, server, tmp_path):
    """Issue 7, defect 12: with --cache-dir, after unmount, status and conflicts still work
    (offline, from state.db) and show the pending change and the conflict."""
    cache_dir = tmp_path / "elsewhere"
    store = mounts.new_store()
    m = mounts.mount(store, "--cache-dir", str(cache_dir))
    assert m.state_dir.is_relative_to(cache_dir)
    (m.path / "c.md").write_text("v1\n")
    m.wait_synced()
    mid = next(x.id for x in server.sdk().beta.memory_stores.memories.list(store)
               if x.path == "/c.md")

    # A conflict, deterministically: our update is held before the server applies it
    # while another client changes the memory; released, it fails its precondition.
    with Gate(server) as gate, ThreadPoolExecutor(1) as pool:
        gate.hold("POST", rf"/memories/{mid}$", when="before", count=1)
        (m.path / "c.md").write_text("ours\n")
        [held] = gate.wait_held(1)
        pool.submit(server.sdk().beta.memory_stores.memories.update, mid,
                    memory_store_id=store, content="theirs\n").result(timeout=30)
        gate.release(held["seq"])
    _wait(lambda: m.live_status()["conflicts"], 30, "the conflict")
    m.wait_synced()

    server.stop()
    (m.path / "d.md").write_text("pending\n")
    assert "1 left" in m.unmount("--timeout", "1", kept=True)
    assert not list((tmp_path / "xdg-cache" / "memfs").glob(f"*/{store}/state.db"))

    st = m.status()  # `memfs status M --json`
    assert st["running"] is False and st["store_id"] == store
    assert st["state_dir"] == str(m.state_dir)
    assert [c["path"] for c in st["pending"]["creates"]] == ["/d.md"]
    assert [c["path"] for c in st["conflicts"]] == ["/c.md"]
    text = m.memfs("conflicts", str(m.path)).stdout
    assert "/c.md" in text, text
    listed = json.loads(m.memfs("conflicts", "--json", str(m.path)).stdout)
    assert [(c["path"], c["local_content"]) for c in listed] == [("/c.md", "ours\n")]
