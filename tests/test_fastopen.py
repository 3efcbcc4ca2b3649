"""Fast opens (memfs/mount/fastopen.py, memfs/_fastopen.c): warm read-only opens answered below
Python, and every way a file's content can change under them.

The rule the handlers keep: an inode is in the shim's set only while a read-only open of it
would be answered exactly as the shim answers it (keep the cache). The first half holds the
handlers to that rule without the kernel; the second half drives real mounts, where the
shim is loaded, and proves each open or read went the way claimed with the daemon's own
counters (`memfs status --json`, "fast_opens").
"""

from __future__ import annotations

import os
import pathlib
import shutil

import pytest
from fs_helpers import ROOT, FsEnv
from mountutil import is_mounted, mount_env, needs_fuse

from memfs.mount import fastopen
from memfs.mount.fastopen import FAST_BIT
from memfs.state.transitions import Remote

shim = pytest.mark.skipif(fastopen._lib is None, reason=f"fast opens {fastopen.describe()}")


@pytest.fixture
def env(tmp_path):
    fastopen.clear()
    e = FsEnv.make(tmp_path)
    yield e
    e.state.close()
    fastopen.clear()


async def _fast_file(env: FsEnv, name: str = "a.md", data: bytes = b"one\n") -> int:
    await env.create(ROOT, name, data)
    ino = env.ino(f"/{name}")
    assert await env.read_all(ino) == data
    return ino


def test_the_shim_is_built_where_it_can_be():
    """`pip install` builds it optionally: make sure CI does not quietly test without it."""
    has_cc = shutil.which("cc") is not None or shutil.which("gcc") is not None
    if os.environ.get(fastopen.ENV) == "0":
        pytest.skip(f"{fastopen.ENV}=0")
    if not (has_cc and pathlib.Path("/usr/include/fuse3/fuse_lowlevel.h").exists()):
        pytest.skip("no C compiler or libfuse3 headers here: the shim is optional")
    assert fastopen._library_path() is not None, "memfs/_fastopen was not built"
    assert fastopen._lib is not None, fastopen.describe()


# -- handlers: when an inode enters and leaves the set ----------------------------------


@shim
async def test_a_read_only_open_marks_the_file_and_a_writer_unmarks_it(env):
    ino = await _fast_file(env)
    assert fastopen.has(ino)
    fi = await env.open(ino, os.O_WRONLY)
    assert not fastopen.has(ino)  # a writer may change it at any time
    await env.ops.release(fi.fh)
    await env.read_all(ino)
    assert fastopen.has(ino)
    fi = await env.open(ino, os.O_RDONLY | os.O_TRUNC)
    assert not fastopen.has(ino)
    await env.ops.release(fi.fh)


@shim
async def test_a_read_only_open_beside_unsaved_writes_does_not_mark(env):
    ino = await _fast_file(env)
    w = await env.open(ino, os.O_WRONLY)
    await env.ops.write(w.fh, 0, b"two\n")
    assert await env.read_all(ino) == b"two\n"
    assert not fastopen.has(ino)  # Python answered keep_cache=False: so must the shim
    await env.ops.flush(w.fh)
    await env.ops.release(w.fh)


@shim
async def test_every_content_change_and_removal_unmarks(env):
    ino = await _fast_file(env)
    node = env.node("/a.md")
    env.state.set_content(node, env.cache.put(b"x"), 1)  # a close elsewhere
    assert not fastopen.has(ino)

    await env.read_all(ino)
    assert fastopen.has(ino)
    node.memory_id, node.base_path, node.base_sha = "mem_1", "/a.md", node.sha  # as if synced
    env.state.remote_content(node, Remote("mem_1", "/a.md", env.cache.put(b"remote"), 6))
    assert not fastopen.has(ino)

    ino_b = await _fast_file(env, "b.md", b"b\n")
    await env.read_all(ino)
    await env.ops.rename(ROOT, b"a.md", ROOT, b"b.md", 0, None)  # b.md replaced
    assert not fastopen.has(ino_b)
    assert fastopen.has(ino)  # a rename does not change what a.md holds

    await env.ops.unlink(ROOT, b"b.md", None)
    assert not fastopen.has(ino)

    ino_c = await _fast_file(env, "c.md", b"c\n")
    env.state._reload()  # a failed commit rolled the tree back: trust nothing
    assert not fastopen.has(ino_c)


async def test_a_read_on_a_fast_handle_reads_by_inode(env):
    ino = await _fast_file(env, data=b"hello world\n")
    assert await env.ops.read(FAST_BIT | ino, 6, 5) == b"world"
    await env.write_file(ino, b"new\n")
    assert await env.ops.read(FAST_BIT | ino, 0, 100) == b"new\n"  # the file, as now
    await env.ops.unlink(ROOT, b"a.md", None)
    # Unlinked since: the content the last open was answered with, as an open fd keeps it.
    assert await env.ops.read(FAST_BIT | ino, 0, 100) == b"new\n"
    await env.ops.release(FAST_BIT | ino)  # never sent in a mount; harmless here


async def test_an_fsync_on_a_fast_handle_makes_the_file_power_safe(env, monkeypatch):
    """`open(O_RDONLY)` + `fsync()` is how some programs make a file durable: the shim
    never answers FSYNC, and Python syncs the inode's blob and state.db."""
    ino = await _fast_file(env, data=b"keep me\n")
    synced: list = []
    monkeypatch.setattr("memfs.mount.open_files.fsync_paths",
                        lambda paths, missing_ok=False: synced.extend(map(str, paths)))
    await env.ops.fsync(FAST_BIT | ino, False)
    sha = env.node("/a.md").sha
    assert any(p.endswith(sha) for p in synced)  # the blob
    assert any(p.endswith("state.db-wal") or p.endswith("state.db") for p in synced)


# -- real mounts ----------------------------------------------------------------------


def _stats(m) -> dict:
    return m.status()["fast_opens"]


def _drop_pages_fd(fd: int) -> None:
    """The kernel drops the file's clean cached pages: the next read comes to the daemon."""
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _drop_pages(path: pathlib.Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        _drop_pages_fd(fd)
    finally:
        os.close(fd)


@needs_fuse
@shim
def test_warm_opens_are_answered_without_python(mounts):
    m = mounts.mount(mounts.new_store())
    f = m.path / "notes.md"
    f.write_text("hello\n")
    assert f.read_text() == "hello\n"  # Python answers, and marks the file
    before = _stats(m)
    assert before["state"] == "on"
    for _ in range(20):
        assert f.read_text() == "hello\n"
    after = _stats(m)
    assert after["answered_opens"] - before["answered_opens"] == 20
    assert after["reads"] == before["reads"]  # the page cache served every byte


@needs_fuse
@shim
def test_reads_after_the_kernel_dropped_the_pages(mounts):
    m = mounts.mount(mounts.new_store())
    f = m.path / "notes.md"
    f.write_text("version one\n")
    assert f.read_text() == "version one\n"
    fd = os.open(f, os.O_RDONLY)  # a fast open, held
    try:
        reads = _stats(m)["reads"]
        _drop_pages(f)
        assert os.pread(fd, 100, 0) == b"version one\n"
        assert _stats(m)["reads"] > reads  # the read reached Python on the fast handle

        # A writer replaces the content while the fast handle is open: the handle reads
        # the file as it is now (one inode, as on any local filesystem).
        with open(f, "w") as w:
            w.write("version two, longer\n")
        _drop_pages(f)
        assert os.pread(fd, 100, 0) == b"version two, longer\n"
        assert f.read_text() == "version two, longer\n"

        fsyncs = _stats(m)["fsyncs"]
        os.fsync(fd)  # power-safe through a read-only descriptor too
        assert _stats(m)["fsyncs"] == fsyncs + 1

        # Unlinked while open: the handle keeps what it was opened on.
        f.unlink()
        _drop_pages_fd(fd)
        assert os.pread(fd, 100, 0) == b"version two, longer\n"
    finally:
        os.close(fd)


@needs_fuse
@shim
def test_a_remote_change_is_never_hidden_by_a_fast_open(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    f = m.path / "notes.md"
    f.write_text("mine\n")
    m.wait_synced()
    for _ in range(3):
        assert f.read_text() == "mine\n"
    assert _stats(m)["answered_opens"] >= 2
    sdk = server.sdk()
    mem = next(x for x in sdk.beta.memory_stores.memories.list(store) if x.type == "memory")
    sdk.beta.memory_stores.memories.update(mem.id, memory_store_id=store, content="theirs\n")
    m.sync_now()
    # Once the change is applied, the next open goes to Python (the set was emptied in
    # the same step), which drops the kernel's pages: no open after it sees "mine".
    seen = [f.read_text() for _ in range(5)]
    assert seen == ["theirs\n"] * 5


@needs_fuse
@shim
def test_session_root_warm_opens_and_dropped_pages(mounts, server):
    sdk = server.sdk()
    a = sdk.beta.memory_stores.create(name="alpha").id
    sdk.beta.memory_stores.memories.create(a, path="/x.md", content="alpha x\n")
    b = sdk.beta.memory_stores.create(name="beta").id
    sdk.beta.memory_stores.memories.create(b, path="/x.md", content="beta x\n")
    m = mounts.mount_group("--all")
    files = {m.path / "alpha" / "x.md": "alpha x\n", m.path / "beta" / "x.md": "beta x\n"}
    for f, text in files.items():
        assert f.read_text() == text
    before = _stats(m)
    for f, text in files.items():
        assert f.read_text() == text
        _drop_pages(f)
        assert f.read_text() == text  # by inode, in the right store
    after = _stats(m)
    assert after["answered_opens"] - before["answered_opens"] >= 4
    assert after["reads"] > before["reads"]


@needs_fuse
def test_without_the_shim_every_open_goes_through_python(server, tmp_path):
    """MEMFS_FAST_OPEN=0 (or no compiler at install time): the same behaviour, slower."""
    from mountutil import MountProc

    env = mount_env(server, tmp_path)
    env["MEMFS_FAST_OPEN"] = "0"
    store = server.sdk().beta.memory_stores.create(name="plain").id
    path = tmp_path / "mnt"
    path.mkdir()
    m = MountProc(path, store, env, ("--write-back-delay", "0.1"))
    try:
        m.mount()
        f = path / "a.md"
        f.write_text("a\n")
        for _ in range(5):
            assert f.read_text() == "a\n"
        _drop_pages(f)
        assert f.read_text() == "a\n"
        stats = _stats(m)
        assert stats["state"].startswith("off") and stats["answered_opens"] == 0
        m.unmount()
    finally:
        m.cleanup()
    assert not is_mounted(path)


@shim
async def test_files_new_to_the_kernel_start_marked(env):
    """A file the kernel never saw holds no pages: from the server, or at mount start."""
    node = env.state.add_remote(Remote("mem_9", "/d/new.md", env.cache.put(b"new\n"), 4))
    assert node is not None and fastopen.has(node.ino)
    await env.create(ROOT, "local.md", b"local\n")
    local = env.ino("/local.md")
    assert not fastopen.has(local)  # created here: its writer's pages may be cached
    fastopen.clear()
    env.fs.prime_fast_opens()
    assert fastopen.has(node.ino) and fastopen.has(local)
    # Unlinked before any read: a handle the shim opened still reads what it held.
    await env.ops.unlink(ROOT, b"local.md", None)
    assert not fastopen.has(local)
    assert await env.ops.read(FAST_BIT | local, 0, 100) == b"local\n"


@needs_fuse
@pytest.mark.parametrize("mode", ["fast-opens", "no-shim"])
def test_readers_racing_an_editor_never_see_a_torn_or_older_version(mounts, mode, monkeypatch):
    """An editor's atomic saves (write a temp file, rename it over) while two readers
    re-read the file as fast as they can: every open succeeds (one that looked the name
    up just before a rename finds the replaced file, as on a local filesystem), each read
    is one whole version, and no reader ever goes back to an older one once it saw a
    newer (fast opens keep no stale pages). In both modes; with the shim, the counters
    prove the fast path served opens during the race."""
    import threading

    if mode == "no-shim":
        monkeypatch.setenv(fastopen.ENV, "0")
    elif fastopen._lib is None:
        pytest.skip(f"fast opens {fastopen.describe()}")
    m = mounts.mount(mounts.new_store())
    f = m.path / "notes.md"
    body = "line {i:04d} " * 40 + "\n"  # ~500 bytes, every line names its version
    f.write_text(body.format(i=0))
    before = _stats(m)["answered_opens"]
    stop = threading.Event()
    bad: list[str] = []

    def reader() -> None:
        last = -1
        while not stop.is_set():
            try:
                text = f.read_text()
            except OSError as exc:  # the name always exists: rename(2) replaces atomically
                bad.append(f"read failed: {exc!r}")
                return
            versions = {int(w) for w in text.split() if w.isdigit()}
            if len(versions) != 1 or text != body.format(i=next(iter(versions))):
                bad.append(f"torn read: {text[:60]!r}")
                return
            (v,) = versions
            if v < last:
                bad.append(f"went back from version {last} to {v}")
                return
            last = v

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for i in range(1, 101):
            tmp = m.path / ".notes.md.tmp"
            tmp.write_text(body.format(i=i))
            os.replace(tmp, f)
    finally:
        stop.set()
        for t in readers:
            t.join(timeout=30)
    assert not bad, bad
    assert f.read_text() == body.format(i=100)
    if mode == "fast-opens":
        assert _stats(m)["answered_opens"] > before
