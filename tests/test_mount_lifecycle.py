"""Mount lifecycle through a real mount: crash, offline, flush on every way out, failures.

kill -9 after fsync'd writes, restart with the server down, `memfs unmount`
with the server down, `fusermount3 -u` and SIGTERM flushing, and mounts that
must fail fast with a clear message.
"""

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from mountutil import is_mounted, mount_env, mounts, needs_fuse, server_memories  # noqa: F401
from synchelpers import sdk_create, wait_for

pytestmark = needs_fuse


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def write_fsync(path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


# -- kill -9 -------------------------------------------------------------------------------


def test_kill9_after_fsync_then_remount(mounts, server):
    store = mounts.new_store()
    c = server.sdk().beta.memory_stores.memories
    existing = c.create(store, path="/keep/old.md", content="old\n")
    # Nothing can be pushed before the kill: only state.db + blobs carry the writes.
    m = mounts.mount(store, "--write-back-delay", "30")
    assert (m.path / "keep" / "old.md").read_text() == "old\n"
    files = {f"/crash/f{i}.md": f"fsynced {i}\n" for i in range(10)}
    (m.path / "crash").mkdir()
    for path, text in files.items():
        write_fsync(str(m.path) + path, text)
    write_fsync(m.path / "keep" / "old.md", "old, edited\n")
    os.rename(m.path / "crash" / "f9.md", m.path / "crash" / "renamed.md")
    files["/crash/renamed.md"] = files.pop("/crash/f9.md")
    m.kill9()
    assert not is_mounted(m.path)
    assert server_memories(server, store) == {"/keep/old.md": "old\n"}

    m2 = mounts.mount(store, "--write-back-delay", "30")
    assert m2.path == m.path
    # At once, from state.db and the blob cache.
    for path, text in files.items():
        assert (m2.path / path[1:]).read_text() == text
    assert (m2.path / "keep" / "old.md").read_text() == "old, edited\n"
    out = m2.unmount()
    assert "0 left" in out, out
    assert server_memories(server, store) == {**files, "/keep/old.md": "old, edited\n"}
    ids = {x.path: x.id for x in c.list(store, view="basic", limit=100) if x.type == "memory"}
    assert ids["/keep/old.md"] == existing.id


def staged_count(state_dir) -> int:
    import sqlite3

    db = sqlite3.connect(str(state_dir / "objects" / "staged.db"))
    try:
        return db.execute("SELECT count(*) FROM staged").fetchone()[0]
    finally:
        db.close()


@contextlib.contextmanager
def fuse_kept_busy(directory: pathlib.Path) -> Iterator[None]:
    """A reader that keeps the daemon's FUSE side from ever being quiet (getxattr always
    reaches the daemon), so the blob writer, which waits for 0.3 s of quiet, stays idle;
    it ends with the block, or when the mount goes (a kill)."""
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            try:
                os.getxattr(directory, "user.memfs.state")
            except OSError:
                return  # the mount is gone
            stop.wait(0.02)

    reader = threading.Thread(target=busy)
    reader.start()
    try:
        yield
    finally:
        stop.set()
        reader.join()


def test_unmount_leaves_the_content_staged_for_the_next_mount(mounts, server):
    """`memfs unmount` pushes what a `cp -r` just wrote but makes no blob file of it:
    its content stays in staged.db (synced), and the next mount serves it and moves
    it. (Making 500 files there cost the unmount 0.2-0.4 s, 1 s more with their
    fsyncs.) A reader keeps FUSE busy through the unmount (it ends when the mount
    goes), so the background writer, which waits for 0.3 s of quiet, never runs: what
    is on disk after is what the unmount made. (With the reader stopped before the
    unmount, an idle machine let the writer move all 200 in the command's start-up.)"""
    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "30")
    files = {f"/cp/f{i:03}.md": f"copied {i}\n" for i in range(200)}
    (m.path / "cp").mkdir()
    state_dir = m.state_dir
    with fuse_kept_busy(m.path / "cp"):
        for path, text in files.items():
            (m.path / path[1:]).write_text(text)
        out = m.unmount()
    assert "0 left" in out, out
    assert server_memories(server, store) == files
    assert staged_count(state_dir) > 0, "the unmount made blob files of the staged content"

    m2 = mounts.mount(store, "--write-back-delay", "30")
    for path, text in files.items():
        assert (m2.path / path[1:]).read_text() == text
    wait_for(lambda: staged_count(m2.state_dir) == 0, timeout=30)  # moved once quiet
    blobs = {p.read_text() for p in (m2.state_dir / "objects").glob("??/*")
             if not p.name.startswith(".")}
    assert set(files.values()) <= blobs
    assert "0 left" in m2.unmount()


def test_kill9_right_after_close_finds_the_staged_content(mounts, server):
    """A close stages its content in objects/staged.db; the blob writer makes files
    only once FUSE is quiet. A reader keeps the mount busy so the kill surely comes
    before the move (the test checks that the rows are there), and a remount serves
    the closed, never-fsync'd writes, makes them files and pushes them."""
    import sqlite3

    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "30")
    files = {f"/closed/f{i}.md": f"closed, not fsync'd {i}\n" for i in range(20)}
    (m.path / "closed").mkdir()
    with fuse_kept_busy(m.path / "closed"):
        for path, text in files.items():
            (m.path / path[1:]).write_text(text)
        m.kill9()
    db = sqlite3.connect(str(m.state_dir / "objects" / "staged.db"))
    try:
        staged = {bytes(data).decode() for _, data in db.execute("SELECT sha, data FROM staged")}
    finally:
        db.close()
    assert staged >= set(files.values()), "the kill came after the move: nothing was tested"

    m2 = mounts.mount(store, "--write-back-delay", "30")
    for path, text in files.items():
        assert (m2.path / path[1:]).read_text() == text

    def moved() -> bool:
        db = sqlite3.connect(str(m2.state_dir / "objects" / "staged.db"))
        try:
            return db.execute("SELECT count(*) FROM staged").fetchone()[0] == 0
        finally:
            db.close()

    wait_for(moved, timeout=30)  # the writer made them files once the mount was quiet
    objects = m2.state_dir / "objects"
    blobs = {p.read_text() for p in objects.glob("??/*") if not p.name.startswith(".")}
    assert set(files.values()) <= blobs
    out = m2.unmount()
    assert "0 left" in out, out
    assert server_memories(server, store) == files


def test_unmount_after_the_daemon_died_says_what_is_not_on_the_server(mounts, server):
    """A dead daemon flushed nothing: `memfs unmount` clears the mount and said no more,
    exit 0, with a write only in the journal (found by a helper, 6 December). It now
    counts what state.db holds, as status does, and exits 3; the next mount sends it."""
    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "600")
    (m.path / "p.md").write_text("precious\n")
    m._sigkill()
    proc = m.memfs("unmount", str(m.path), check=False)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "the daemon was gone" in proc.stdout
    assert "1 change(s) written there are NOT on the server" in proc.stdout, proc.stdout
    assert not is_mounted(m.path)
    m = mounts.mount(store)
    m.wait_synced()
    assert server_memories(server, store) == {"/p.md": "precious\n"}


def test_unmount_after_the_daemon_died_counts_each_change_once(mounts, server):
    """A file edited and renamed is one change, not an update and a rename; a create
    whose answer was lost (the server holds it) is a request in doubt, not a change
    "NOT on the server" counted with its create (both said "2 change(s) written there
    are NOT on the server": a helper, 6 December). Exit 3 still: the outcome waits."""
    from gate import Gate

    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "600")
    (m.path / "x.md").write_text("v1\n")
    m.sync_now()
    m.memfs("unmount", str(m.path))  # pushed x.md
    m.mount()
    (m.path / "x.md").write_text("v2\n")
    os.rename(m.path / "x.md", m.path / "y.md")
    m._sigkill()
    proc = m.memfs("unmount", str(m.path), check=False)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "\n  1 change(s) written there are NOT on the server" in proc.stdout, proc.stdout
    status = m.memfs("status", str(m.path)).stdout  # which, as the unmount says it does
    assert "\n    update /y.md\n    rename /x.md -> /y.md\n" in status, status

    other = mounts.new_store()
    m = mounts.mount(other, name="other")
    with Gate(server) as gate:
        gate.hold("POST", rf"/memory_stores/{other}/memories$", when="after", count=1,
                  drop=True)
        (m.path / "a.md").write_text("hello\n")
        gate.wait_held(1)  # applied: the server holds it, its answer never comes
        m._sigkill()
    assert server_memories(server, other) == {"/a.md": "hello\n"}
    proc = m.memfs("unmount", str(m.path), check=False)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "NOT on the server" not in proc.stdout, proc.stdout
    assert "\n  1 request(s) whose answer was lost may have been applied by the server: " \
        "the next mount asks it" in proc.stdout, proc.stdout
    status = m.memfs("status", str(m.path)).stdout
    assert "\n    create /a.md (sent, its answer lost: the server is asked first)\n" in \
        status, status
    m = mounts.mount(other, name="other")
    m.wait_synced()
    assert server_memories(server, other) == {"/a.md": "hello\n"}
    assert "0 left" in m.unmount()


def test_kill9_then_remount_pushes_on_its_own(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "30")
    write_fsync(m.path / "a.md", "a\n")
    m.kill9()
    m2 = mounts.mount(store)  # write-back 0.1 s now: the pusher sends it by itself
    assert (m2.path / "a.md").read_text() == "a\n"
    m2.wait_synced()
    assert server_memories(server, store) == {"/a.md": "a\n"}


# -- offline ---------------------------------------------------------------------------------


def test_restart_offline_from_cache(mounts, server):
    store = mounts.new_store()
    c = server.sdk().beta.memory_stores.memories
    c.create(store, path="/docs/a.md", content="cached a\n")
    c.create(store, path="/docs/b.md", content="cached b\n")
    # In another top-level directory: a read's miss pulls its own directory's batch.
    c.create(store, path="/other/never-read.md", content="not cached\n")
    m = mounts.mount(store, "--no-prefetch")
    assert (m.path / "docs" / "a.md").read_text() == "cached a\n"
    assert (m.path / "docs" / "b.md").read_text() == "cached b\n"
    m.unmount()
    server.kill()

    m = mounts.mount(store)
    notice = m.outputs[-1].stderr
    assert "offline" in notice and "unreachable" in notice, notice
    out = subprocess.run(["cat", str(m.path / "docs" / "a.md"), str(m.path / "docs" / "b.md")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout == "cached a\ncached b\n", out
    # Content never fetched: listed, but reading it is EIO (not empty, not stale).
    assert os.stat(m.path / "other" / "never-read.md").st_size == len("not cached\n")
    with pytest.raises(OSError) as info:
        (m.path / "other" / "never-read.md").read_text()
    assert info.value.errno == errno.EIO
    # Writes are journaled.
    (m.path / "docs" / "new.md").write_text("written offline\n")
    (m.path / "docs" / "a.md").write_text("edited offline\n")
    os.unlink(m.path / "docs" / "b.md")
    status = wait_for(lambda: (lambda s: s if not s["online"] else None)(m.live_status()))
    assert [x["path"] for x in status["pending"]["creates"]] == ["/docs/new.md"]
    assert [x["path"] for x in status["pending"]["updates"]] == ["/docs/a.md"]
    assert [x["path"] for x in status["pending"]["deletes"]] == ["/docs/b.md"]
    # The sync before this start is said, not "never" (found by a helper).
    assert status["last_sync_at"] is None and status["synced_before"] > 0
    assert ", before this mount started\n" in m.memfs("status", str(m.path)).stdout

    server.start()  # no nudge: the daemon finds the server again by itself
    m.wait_synced(timeout=60)
    assert server_memories(server, store) == {"/docs/a.md": "edited offline\n",
                                              "/docs/new.md": "written offline\n",
                                              "/other/never-read.md": "not cached\n"}
    assert (m.path / "other" / "never-read.md").read_text() == "not cached\n"
    assert m.status()["online"]


def test_fetched_content_reaches_the_disk_cache_once_quiet(mounts, server):
    """A cold fill holds fetched content in memory (reads never wait for a file
    creation); the daemon writes it to the disk cache once the mount is quiet, so a
    restart after kill -9 reads it offline."""
    store = mounts.new_store()
    c = server.sdk().beta.memory_stores.memories
    want = {f"/d{i % 3}/n{i}.md": f"note {i}\n" for i in range(30)}
    for path, content in want.items():
        c.create(store, path=path, content=content)
    m = mounts.mount(store)
    for path, content in want.items():
        assert (m.path / path[1:]).read_text() == content
    objects = m.state_dir / "objects"

    def blobs_on_disk() -> int:
        return sum(1 for p in objects.rglob("*") if p.is_file() and not p.name.startswith("."))

    wait_for(lambda: blobs_on_disk() == len(want), timeout=30)
    m.kill9()
    server.kill()
    m = mounts.mount(store)
    assert "offline" in m.outputs[-1].stderr
    for path, content in want.items():
        assert (m.path / path[1:]).read_text() == content


def test_unmount_with_server_down_then_next_mount(mounts, server):
    store = mounts.new_store()
    # (a create the flush sends as the server dies may be in doubt: --lost-answer-wait 1)
    m = mounts.mount(store, "--write-back-delay", "30", "--lost-answer-wait", "1")
    (m.path / "x.md").write_text("x\n")
    (m.path / "d").mkdir()
    (m.path / "d" / "y.md").write_text("y\n")
    server.kill()
    out = m.unmount("--timeout", "3", kept=True)
    assert "pushed 0 change(s), 2 left" in out, out
    assert "next mount" in out, out
    assert not is_mounted(m.path)
    # `memfs status` without a daemon still shows what is journaled.
    st = m.status()
    assert not st["running"]
    assert sorted(x["path"] for x in st["pending"]["creates"]) == ["/d/y.md", "/x.md"]

    server.start()
    assert server_memories(server, store) == {}
    m = mounts.mount(store, "--lost-answer-wait", "1")
    assert (m.path / "d" / "y.md").read_text() == "y\n"
    m.wait_synced()
    assert server_memories(server, store) == {"/x.md": "x\n", "/d/y.md": "y\n"}


# -- every way out flushes ------------------------------------------------------------------


@pytest.mark.parametrize("how", ["fusermount3", "sigterm", "sigint"])
def test_outside_unmount_and_signals_flush(mounts, server, how):
    store = mounts.new_store()
    # A write-back delay far beyond the test: only the exit flush can push.
    m = mounts.mount(store, "--write-back-delay", "300", "--delete-delay", "300")
    (m.path / "one.md").write_text("one\n")
    (m.path / "sub").mkdir()
    (m.path / "sub" / "two.md").write_text("two\n")
    assert m.pending_total() == 2
    (m.path / "bad.md").write_bytes(b"\xff not UTF-8\n")  # refused: stays here, said so
    if how == "fusermount3":
        subprocess.run(["fusermount3", "-u", str(m.path)], check=True, timeout=30)
    else:
        os.kill(m.pid, signal.SIGTERM if how == "sigterm" else signal.SIGINT)
    wait_for(lambda: pid_gone(m.pid))
    assert not is_mounted(m.path)
    assert server_memories(server, store) == {"/one.md": "one\n", "/sub/two.md": "two\n"}
    log = (m.state_dir / "daemon.log").read_text()
    assert "flush: pushed 2, left 0" in log
    # No `memfs unmount` to tell the user: the log names what stays here, and why.
    assert ("1 file(s) stay here only, NOT on the server: /bad.md: content is not valid "
            "UTF-8") in log, log


#: A writer that has written and not closed: another process (a fork of the test's own
#: would close the files in the child, and a close of any descriptor saves).
HOLDER = """
import sys
new = open(sys.argv[1] + "/new.md", "w")
old = open(sys.argv[1] + "/old.md", "a")
new.write("unsaved\\n"); old.write("appended\\n")
new.flush(); old.flush()  # write(2) done; no close
print("written", flush=True)
sys.stdin.read()  # until the test lets go
"""


@pytest.mark.parametrize("how", ["unmount", "sigterm"])
def test_files_still_open_with_unsaved_writes_are_saved_at_unmount(mounts, server, how):
    """A process that wrote and has not closed yet: write() took its bytes, and the
    unmount (or SIGTERM) took the daemon away with them in memory only, saying "0
    left" (found by a helper, 6 December). Now they are saved as they stand and pushed,
    and named; the writer's close fails later (the mount is gone), nothing lost."""
    store = mounts.new_store()
    sdk_create(server, store, "/old.md", "existing\n")
    m = mounts.mount(store, "--write-back-delay", "300")
    wait_for(lambda: (m.path / "old.md").exists(), what="seeded")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(m.path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "written\n"
        if how == "unmount":
            out = m.unmount()
            assert "pushed 2 change(s), 0 left" in out, out
            assert "2 file(s) were still open with unsaved writes" in out, out
            assert "/new.md: open with unsaved writes at unmount: saved as they stood" in out
        else:
            os.kill(m.pid, signal.SIGTERM)
            wait_for(lambda: pid_gone(m.pid))
            log = (m.state_dir / "daemon.log").read_text()
            assert "2 file(s) were still open with unsaved writes: /" in log, log
        assert server_memories(server, store) == {"/new.md": "unsaved\n",
                                                  "/old.md": "existing\nappended\n"}
    finally:
        holder.kill()
        holder.wait()


# -- mounts that must fail --------------------------------------------------------------------


def _mount_cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memfs", "mount", *args], env=env,
                          capture_output=True, text=True, timeout=90)


def _assert_failed(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode != 0, proc
    err = proc.stderr.lower()
    assert err.startswith("error:") or "error" in err, proc.stderr
    for w in words:
        assert w in err, proc.stderr
    assert "traceback" not in err, proc.stderr


def test_mount_failures(mounts, server, tmp_path):
    store = mounts.new_store()
    env = mount_env(server, tmp_path)
    mp = tmp_path / "mp"
    mp.mkdir()

    _assert_failed(_mount_cli(env, "memstore_doesnotexist", str(mp)), "unknown store")
    assert not is_mounted(mp)

    bad = dict(env, ANTHROPIC_API_KEY="wrong-key")
    proc = _mount_cli(bad, store, str(mp))
    _assert_failed(proc, "credentials")
    assert "wrong-key" not in proc.stderr + proc.stdout  # never print the key
    assert not is_mounted(mp)

    nowhere = dict(env, ANTHROPIC_BASE_URL="http://127.0.0.1:1")
    _assert_failed(_mount_cli(nowhere, store, str(mp)), "cannot reach", "cached")
    assert not is_mounted(mp)

    _assert_failed(_mount_cli(env, store, str(tmp_path / "missing")), "does not exist")

    m = mounts.mount(store, name="busy")
    _assert_failed(_mount_cli(env, store, str(m.path)), "busy")
    other = mounts.new_store("other")
    _assert_failed(_mount_cli(env, other, str(m.path)), "busy")
    # The same store at a second mountpoint: its state dir is locked by the first daemon.
    _assert_failed(_mount_cli(env, store, str(mp)), "already mounted")
    assert not is_mounted(mp)
    (m.path / "still.md").write_text("the first mount is unharmed\n")
    m.unmount()
    assert server_memories(server, store) == {"/still.md": "the first mount is unharmed\n"}
