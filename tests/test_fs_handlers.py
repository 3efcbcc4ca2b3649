"""Handler-level tests of the FUSE layer (memfs/mount/router.py and its parts), no kernel.

Each test builds a State + BlobCache + a plain mount's Router in tmp_path and calls the
pyfuse3 handlers directly. docs/SEMANTICS.md is the specification these
tests hold the code to; keep the two in step.
"""

from __future__ import annotations

import errno
import os
import stat
from types import SimpleNamespace

import pyfuse3
import pytest
import trio
import trio.testing
from fs_helpers import ROOT, Fields, FsEnv, attrs, ctx, fuse_errno, mount_ops, record_fsyncs

from memfs.core import paths
from memfs.core.nodes import Remote
from memfs.mount.open_files import LOCAL_ONLY_MAX_BYTES
from memfs.state.blobs import BlobCache, sha256
from memfs.state.state import EMPTY_SHA

MAX = paths.MAX_CONTENT_BYTES


@pytest.fixture
def env(tmp_path) -> FsEnv:
    e = FsEnv.make(tmp_path)
    yield e
    e.state.close()


# -- create / write / read / durability -------------------------------------------


async def test_create_write_read_flush_is_durable(env):
    fh, attr = await env.create(ROOT, "notes.md", keep_open=True)
    assert stat.S_ISREG(attr.st_mode) and attr.st_size == 0
    assert await env.ops.write(fh, 0, b"hello ") == 6
    assert await env.ops.write(fh, 6, b"world") == 5
    assert await env.ops.read(fh, 0, 100) == b"hello world"
    assert await env.ops.read(fh, 6, 3) == b"wor"
    assert (await env.ops.getattr(attr.st_ino, ctx())).st_size == 11

    # Not yet durable: the row still holds the empty file.
    assert env.reopen_state().lookup_path("/notes.md").sha == EMPTY_SHA

    await env.ops.flush(fh)
    sha = sha256(b"hello world")
    # Crash safety: a new State and a new cache on the same (unclosed) files see the
    # content. It is staged (staged.db), not a file yet: the blob writer's job.
    assert not env.cache._path(sha).exists()
    assert BlobCache(env.cache.root).get(sha) == b"hello world"
    fresh = env.reopen_state()
    node = fresh.lookup_path("/notes.md")
    assert node is not None and node.sha == sha and node.size == 11
    assert fresh.is_dirty(node)  # no base yet: the pusher has work
    fresh.close()

    await env.ops.release(fh)
    assert await env.read_all(attr.st_ino) == b"hello world"


async def test_release_without_flush_persists(env):
    fi, attr = await env.ops.create(ROOT, b"a", stat.S_IFREG | 0o644, os.O_WRONLY, ctx())
    await env.ops.write(fi.fh, 0, b"data")
    await env.ops.release(fi.fh)
    assert env.reopen_state().lookup_path("/a").sha == sha256(b"data")


async def test_fsync_is_the_power_loss_durability_point(env, monkeypatch):
    """After fsync returns, everything a restart needs has been fsync'd: the blob,
    its directory entries, the WAL (where the commit is) and the database."""
    fh, attr = await env.create(ROOT, "f", keep_open=True)
    await env.ops.write(fh, 0, b"synced")
    synced = record_fsyncs(monkeypatch)
    await env.ops.fsync(fh, False)  # never ENOSYS
    sha = sha256(b"synced")
    blob = env.cache._path(sha)
    staged = env.cache.root / "staged.db"
    db = env.state.db_path
    # The content is staged: its WAL carries it, as state.db's WAL carries the row.
    for path in (staged.with_name("staged.db-wal"), staged, env.cache.root,
                 db.with_name(db.name + "-wal"), db, db.parent):
        assert str(path) in synced, f"{path} was not fsync'd"
    assert env.reopen_state().lookup_path("/f").sha == sha
    # Once the blob writer made it a file, the file and its directory entries.
    env.cache.write_staged(env.cache.staged())
    env.cache.unstage([sha])
    synced.clear()
    await env.ops.fsync(fh, True)  # datasync: the same
    for path in (blob, blob.parent, env.cache.root):
        assert str(path) in synced, f"{path} was not fsync'd"
    await env.ops.release(fh)
    synced.clear()
    dfh = await env.ops.opendir(ROOT, ctx())
    await env.ops.fsyncdir(dfh, False)
    await env.ops.releasedir(dfh)
    assert str(db) in synced and str(db.with_name(db.name + "-wal")) in synced


async def test_close_is_the_crash_durability_point_without_fsync(env, monkeypatch):
    """close() makes the content survive a killed daemon (written and committed) but
    does not pay for fsync: that is fsync()'s job (docs/SEMANTICS.md)."""
    synced = record_fsyncs(monkeypatch)
    fh, attr = await env.create(ROOT, "f", b"closed", keep_open=True)
    await env.ops.release(fh)
    assert synced == []
    assert env.reopen_state().lookup_path("/f").sha == sha256(b"closed")
    assert BlobCache(env.cache.root).get(sha256(b"closed")) == b"closed"  # a restart's view


async def test_a_torn_blob_is_rewritten_not_trusted(env, monkeypatch):
    """A blob torn by a power cut (after a close without fsync) must not be synced as
    is when the same content is written and fsync'd again after the restart."""
    data = b"the same content, saved twice"
    path = env.cache._path(sha256(data))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data[:7])          # what survived the power cut
    fresh = BlobCache(env.cache.root)   # a restarted daemon: nothing verified yet
    fresh.put(data, fsync=True)
    assert path.read_bytes() == data
    path.write_bytes(b"")               # torn to nothing
    assert BlobCache(env.cache.root).get(sha256(data)) is None   # never served torn
    BlobCache(env.cache.root).put(data)
    assert path.read_bytes() == data


async def test_write_past_eof_fills_zeros_and_overwrite(env):
    fh, attr = await env.create(ROOT, "f", b"abc", keep_open=True)
    await env.ops.write(fh, 5, b"Z")
    await env.ops.write(fh, 1, b"B")
    assert await env.ops.read(fh, 0, 100) == b"aBc\0\0Z"
    await env.ops.release(fh)


async def test_o_append_writes_at_the_end_whatever_offset_the_kernel_gives(env):
    """Without the writeback cache the kernel sends an O_APPEND write at the size it
    cached, which another writer's change may have made stale (docs/SEMANTICS.md,
    write): the handle writes at the content's end, a handle without it where told."""
    fh, attr = await env.create(ROOT, "log", b"one\ntwo\n")
    appender = await env.open(attr.st_ino, os.O_WRONLY | os.O_APPEND)
    plain = await env.open(attr.st_ino, os.O_WRONLY)
    assert await env.ops.write(appender.fh, 0, b"A\n") == 2        # a stale offset: 0
    assert await env.ops.write(appender.fh, 1000, b"B\n") == 2     # past the end
    assert await env.ops.write(plain.fh, 0, b"1") == 1             # where it says
    await env.ops.release(appender.fh)
    await env.ops.release(plain.fh)
    assert await env.read_all(attr.st_ino) == b"1ne\ntwo\nA\nB\n"
    fi, made = await env.ops.create(ROOT, b"new", stat.S_IFREG | 0o644,
                                    os.O_WRONLY | os.O_CREAT | os.O_APPEND, ctx())
    await env.ops.write(fi.fh, 0, b"x")
    await env.ops.write(fi.fh, 0, b"y")  # `>>` onto a new file, the kernel's size 0
    await env.ops.release(fi.fh)
    assert await env.read_all(made.st_ino) == b"xy"
    appender = await env.open(attr.st_ino, os.O_WRONLY | os.O_APPEND)
    assert await fuse_errno(env.ops.write(appender.fh, 0, b"z" * MAX)) == errno.EFBIG
    await env.ops.release(appender.fh)
    assert await env.read_all(attr.st_ino) == b"1ne\ntwo\nA\nB\n"


async def test_write_over_limit_is_efbig_and_keeps_data(env):
    fh, attr = await env.create(ROOT, "big", b"keep me", keep_open=True)
    assert await fuse_errno(env.ops.write(fh, MAX - 1, b"xy")) == errno.EFBIG
    assert await fuse_errno(env.ops.write(fh, 0, b"x" * (MAX + 1))) == errno.EFBIG
    assert await env.ops.read(fh, 0, 100) == b"keep me"
    await env.ops.release(fh)
    assert await env.read_all(attr.st_ino) == b"keep me"
    # Exactly the limit is fine.
    await env.write_file(attr.st_ino, b"y" * MAX)
    assert env.node("/big").size == MAX


async def test_local_only_files_may_exceed_memory_limit(env):
    fh, attr = await env.create(ROOT, ".big.swp", keep_open=True)
    assert await env.ops.write(fh, 0, b"s" * (MAX + 10)) == MAX + 10
    assert await fuse_errno(env.ops.write(fh, LOCAL_ONLY_MAX_BYTES, b"x")) == errno.EFBIG
    await env.ops.release(fh)


async def test_non_utf8_content_is_accepted_locally(env):
    _, attr = await env.create(ROOT, "bin.dat", b"\xff\xfe\x00junk")
    assert await env.read_all(attr.st_ino) == b"\xff\xfe\x00junk"
    # Marking it refused is the pusher's job; locally it is simply pending.
    assert await env.ops.getxattr(attr.st_ino, b"user.memfs.state", ctx()) == b"pending"


async def test_open_o_trunc_empties_the_file(env):
    _, attr = await env.create(ROOT, "f", b"old content")
    fi = await env.open(attr.st_ino, os.O_WRONLY | os.O_TRUNC)
    assert (await env.ops.getattr(attr.st_ino, ctx())).st_size == 0
    await env.ops.write(fi.fh, 0, b"new")
    await env.ops.release(fi.fh)
    assert await env.read_all(attr.st_ino) == b"new"


# -- setattr ---------------------------------------------------------------------------


async def test_truncate(env):
    _, attr = await env.create(ROOT, "f", b"0123456789")
    ino = attr.st_ino
    out = await env.ops.setattr(ino, attrs(st_size=4), Fields(update_size=True), None, ctx())
    assert out.st_size == 4
    assert env.reopen_state().lookup_path("/f").sha == sha256(b"0123")  # durable at once
    await env.ops.setattr(ino, attrs(st_size=6), Fields(update_size=True), None, ctx())
    assert await env.read_all(ino) == b"0123\0\0"
    await env.ops.setattr(ino, attrs(st_size=MAX), Fields(update_size=True), None, ctx())
    assert await fuse_errno(env.ops.setattr(
        ino, attrs(st_size=MAX + 1), Fields(update_size=True), None, ctx())) == errno.EFBIG
    assert env.node("/f").size == MAX


async def test_truncate_through_open_handle(env):
    fh, attr = await env.create(ROOT, "f", b"abcdef", keep_open=True)
    await env.ops.write(fh, 6, b"gh")
    await env.ops.setattr(attr.st_ino, attrs(st_size=3), Fields(update_size=True), fh, ctx())
    assert await env.ops.read(fh, 0, 100) == b"abc"
    await env.ops.write(fh, 3, b"D")
    await env.ops.release(fh)
    assert await env.read_all(attr.st_ino) == b"abcD"


async def test_truncate_to_zero_needs_no_content(tmp_path):
    """`: > file` on an uncached file while offline must not fail with EIO."""
    async def offline(node):
        raise OSError("offline")

    env = FsEnv.make(tmp_path, fetch=offline)
    _, attr = await env.create(ROOT, "f")
    node = env.node("/f")
    remote = sha256(b"remote content")
    env.state.set_content(node, remote, 14)
    env.state.adopt_own_write(node, Remote("mem_f", "/f", remote))  # clean, blob not cached
    assert await fuse_errno(env.read_all(attr.st_ino)) == errno.EIO
    await env.ops.setattr(attr.st_ino, attrs(st_size=0), Fields(update_size=True), None, ctx())
    assert env.node("/f").sha == EMPTY_SHA
    assert await env.read_all(attr.st_ino) == b""


async def test_truncate_directory_is_eisdir(env):
    d = await env.mkdir(ROOT, "d")
    assert await fuse_errno(env.ops.setattr(
        d, attrs(st_size=0), Fields(update_size=True), None, ctx())) == errno.EISDIR


async def test_chmod_chown_utimens_kept_locally(env):
    _, attr = await env.create(ROOT, "f", b"x")
    ino = attr.st_ino
    new = attrs(st_mode=stat.S_IFREG | 0o600, st_uid=1234, st_gid=5678,
                st_atime_ns=1_000_000_000, st_mtime_ns=2_000_000_000)
    out = await env.ops.setattr(ino, new, Fields(update_mode=True, update_uid=True,
                                                 update_gid=True, update_atime=True,
                                                 update_mtime=True), None, ctx())
    assert stat.S_IMODE(out.st_mode) == 0o600 and stat.S_ISREG(out.st_mode)
    assert (out.st_uid, out.st_gid) == (1234, 5678)
    assert (out.st_atime_ns, out.st_mtime_ns) == (1_000_000_000, 2_000_000_000)
    node = env.reopen_state().lookup_path("/f")
    assert (stat.S_IMODE(node.mode), node.uid, node.gid) == (0o600, 1234, 5678)
    assert (node.atime_ns, node.mtime_ns) == (1_000_000_000, 2_000_000_000)
    # Metadata is not content: a synced file stays synced.
    env.state.adopt_own_write(env.node("/f"), Remote("mem_f", "/f", sha256(b"x")))
    await env.ops.setattr(ino, attrs(st_mode=0o644), Fields(update_mode=True), None, ctx())
    assert await env.ops.getxattr(ino, b"user.memfs.state", ctx()) == b"synced"


async def test_setattr_mode_keeps_file_type_on_dirs(env):
    d = await env.mkdir(ROOT, "d")
    out = await env.ops.setattr(d, attrs(st_mode=0o700), Fields(update_mode=True), None, ctx())
    assert stat.S_ISDIR(out.st_mode) and stat.S_IMODE(out.st_mode) == 0o700


# -- names and paths ---------------------------------------------------------------------


BAD_NAMES = [
    pytest.param(b"a\x01b", id="control"),
    pytest.param(b"tab\there", id="tab"),
    pytest.param("a\u2028b".encode(), id="U+2028"),
    pytest.param("a\u2029b".encode(), id="U+2029"),
    pytest.param("zero\u200bwidth".encode(), id="format-Cf"),
    pytest.param("cafe\u0301".encode(), id="non-NFC"),
    pytest.param(b"\xff\xfe", id="non-UTF-8"),
]


@pytest.mark.parametrize("name", BAD_NAMES)
async def test_bad_names_are_einval(env, name):
    assert await fuse_errno(env.ops.create(ROOT, name, stat.S_IFREG | 0o644, os.O_WRONLY,
                                           ctx())) == errno.EINVAL
    assert await fuse_errno(env.ops.mknod(ROOT, name, stat.S_IFREG | 0o644, 0,
                                          ctx())) == errno.EINVAL
    assert await fuse_errno(env.ops.mkdir(ROOT, name, 0o755, ctx())) == errno.EINVAL
    _, attr = await env.create(ROOT, "ok")
    assert await fuse_errno(env.ops.rename(ROOT, b"ok", ROOT, name, 0, ctx())) == errno.EINVAL
    assert env.state.lookup_path("/ok") is not None
    assert len(env.state.nodes) == 2  # root + ok


async def test_nfc_name_is_fine(env):
    await env.create(ROOT, "caf\u00e9.md", b"x")
    assert env.state.lookup_path("/caf\u00e9.md") is not None


async def test_path_over_1024_bytes_is_enametoolong(env):
    d = await env.makedirs(["d" * 200] * 4)  # /ddd…/ddd… : 804 bytes
    assert await fuse_errno(env.ops.create(d, b"f" * 220, stat.S_IFREG | 0o644, os.O_WRONLY,
                                           ctx())) == errno.ENAMETOOLONG
    assert await fuse_errno(env.ops.mkdir(d, b"f" * 218, 0o755, ctx())) == errno.ENAMETOOLONG
    await env.create(d, "f" * 219)  # exactly 1,024 bytes
    assert len(env.state.path_of(env.state.child(env.state.nodes[d], "f" * 219)).encode()) \
        == 1024


async def test_more_than_20_segments_is_enametoolong(env):
    d19 = await env.makedirs([f"d{i}" for i in range(19)])
    await env.create(d19, "leaf")  # 20 segments
    await env.ops.mknod(d19, b"x", stat.S_IFREG | 0o644, 0, ctx())  # 20 segments
    # A directory must leave room for a file inside it.
    assert await fuse_errno(env.ops.mkdir(d19, b"d19", 0o755, ctx())) == errno.ENAMETOOLONG
    d18 = env.state.nodes[d19].parent
    assert await fuse_errno(env.ops.rename(d19, b"leaf", d18, b"d18/x", 0, ctx())) \
        == errno.EINVAL


async def test_directory_rename_that_pushes_a_descendant_over_limits(env):
    deep = await env.makedirs([f"d{i}" for i in range(17)])  # 17 segments
    a = await env.mkdir(ROOT, "a")
    c = await env.mkdir(await env.mkdir(a, "b"), "c")
    await env.create(c, "file")  # /a/b/c/file: 4 segments -> 21 under deep
    assert await fuse_errno(env.ops.rename(ROOT, b"a", deep, b"a", 0, ctx())) \
        == errno.ENAMETOOLONG
    assert env.state.lookup_path("/a/b/c/file") is not None
    # Byte length: a long-named file below a directory moved under long names.
    long = await env.makedirs(["L" * 200] * 4)  # 804 bytes; + /e/n… = 1,057
    e = await env.mkdir(ROOT, "e")
    await env.create(e, "n" * 250)
    assert await fuse_errno(env.ops.rename(ROOT, b"e", long, b"e", 0, ctx())) \
        == errno.ENAMETOOLONG
    assert env.state.lookup_path("/e/" + "n" * 250) is not None


# -- capacity --------------------------------------------------------------------------


async def test_2001st_memory_is_enospc(env):
    mode = stat.S_IFREG | 0o644
    for i in range(paths.MAX_MEMORIES_PER_STORE):
        fi, _ = await env.ops.create(ROOT, b"f%d" % i, mode, os.O_WRONLY, ctx())
        await env.ops.release(fi.fh)
    s = await env.ops.statfs(ctx())
    assert (s.f_files, s.f_ffree) == (2000, 0)
    assert await fuse_errno(env.ops.create(ROOT, b"one-more", mode, os.O_WRONLY,
                                           ctx())) == errno.ENOSPC
    assert await fuse_errno(env.ops.mknod(ROOT, b"one-more", mode, 0, ctx())) == errno.ENOSPC
    assert env.state.lookup_path("/one-more") is None
    # Temp files are local-only: still allowed, and do not count.
    for name in (".x.swp", "x~", ".#x", "#x#", "4913"):
        await env.create(ROOT, name, b"tmp")
    # ... but renaming one to a real name would add a memory.
    assert await fuse_errno(env.ops.rename(ROOT, b".x.swp", ROOT, b"real", 0, ctx())) \
        == errno.ENOSPC
    # Renaming over an existing memory does not add one.
    await env.ops.rename(ROOT, b".x.swp", ROOT, b"f0", 0, ctx())
    assert await env.read_all(env.ino("/f0")) == b"tmp"
    # Directories are not memories.
    await env.mkdir(ROOT, "dir")
    # Deleting a file frees a slot.
    await env.ops.unlink(ROOT, b"f1", ctx())
    await env.create(ROOT, "one-more")


async def test_capacity_check_agrees_with_the_count(env, monkeypatch):
    """The create path's capacity check (State.at_capacity, no scan of the store until
    it is close to full) answers exactly what a full count does, whatever changed:
    creates, temp names and renames to and from them, refusals, unlinks."""
    monkeypatch.setattr(paths, "MAX_MEMORIES_PER_STORE", 5)
    st = env.state
    mode = stat.S_IFREG | 0o644

    def check(full: bool) -> None:
        assert st.memory_count() >= 5 if full else st.memory_count() < 5
        assert st.at_capacity() == full

    recounts = []
    real_recount = st._recount
    monkeypatch.setattr(st, "_recount", lambda: recounts.append(1) or real_recount())
    for name in ("a", "b", ".c.swp", "d~"):
        await env.create(ROOT, name, b"x")
    assert recounts == []  # far from the cap: no scan
    check(False)                                                    # a b
    await env.ops.rename(ROOT, b".c.swp", ROOT, b"c", 0, ctx())    # a b c
    await env.ops.rename(ROOT, b"a", ROOT, b"a~", 0, ctx())        # b c
    st.refuse_locally(env.node("/b"), "refused")  # counted still: b c (an edit makes
    await env.create(ROOT, "e", b"x")             # it a memory, with no create to refuse)
    await env.create(ROOT, "f", b"x")                              # b c e f
    check(False)
    await env.create(ROOT, "g", b"x")                              # b c e f g
    check(True)
    assert await fuse_errno(env.ops.create(ROOT, b"i", mode, os.O_WRONLY, ctx())) \
        == errno.ENOSPC
    assert await fuse_errno(env.ops.rename(ROOT, b"a~", ROOT, b"a", 0, ctx())) == errno.ENOSPC
    await env.ops.unlink(ROOT, b"f", ctx())                        # b c e g
    check(False)
    await env.create(ROOT, "i", b"x")                              # b c e g i
    check(True)
    await env.ops.rename(ROOT, b"i", ROOT, b"i~", 0, ctx())        # b c e g
    check(False)
    await env.write_file(env.node("/b").ino, b"y")  # no longer refused: as many
    check(False)
    await env.create(ROOT, "h", b"x")                              # b c e g h
    check(True)


# -- read-only mounts --------------------------------------------------------------------


async def test_read_only_refuses_every_mutation(tmp_path, monkeypatch):
    rw = FsEnv.make(tmp_path)
    _, attr = await rw.create(ROOT, "f", b"content")
    d = await rw.mkdir(ROOT, "d")
    await rw.create(d, "g", b"g")
    await rw.mkdir(ROOT, "empty")
    ro = FsEnv(tmp_path, rw.state, rw.cache, mount_ops(rw.state, rw.cache, read_only=True))
    ops, f = ro.ops, attr.st_ino
    reg = stat.S_IFREG | 0o644
    cases = {
        "create": ops.create(ROOT, b"new", reg, os.O_WRONLY, ctx()),
        "mknod": ops.mknod(ROOT, b"new", reg, 0, ctx()),
        "mkdir": ops.mkdir(ROOT, b"new", 0o755, ctx()),
        "unlink": ops.unlink(ROOT, b"f", ctx()),
        "rmdir": ops.rmdir(ROOT, b"empty", ctx()),
        "rename": ops.rename(ROOT, b"f", ROOT, b"f2", 0, ctx()),
        "rename-exchange": ops.rename(ROOT, b"f", d, b"g", pyfuse3.RENAME_EXCHANGE, ctx()),
        "truncate": ops.setattr(f, attrs(st_size=0), Fields(update_size=True), None, ctx()),
        "chmod": ops.setattr(f, attrs(st_mode=0o600), Fields(update_mode=True), None, ctx()),
        "chown": ops.setattr(f, attrs(st_uid=5), Fields(update_uid=True), None, ctx()),
        "utimens": ops.setattr(f, attrs(st_mtime_ns=5), Fields(update_mtime=True), None, ctx()),
        "open-wronly": ops.open(f, os.O_WRONLY, ctx()),
        "open-rdwr": ops.open(f, os.O_RDWR, ctx()),
        "open-trunc": ops.open(f, os.O_RDONLY | os.O_TRUNC, ctx()),
        "setxattr": ops.setxattr(f, b"user.other", b"v", ctx()),
        "setxattr-memfs": ops.setxattr(f, b"user.memfs.state", b"v", ctx()),
        "removexattr": ops.removexattr(f, b"user.other", ctx()),
        "symlink": ops.symlink(ROOT, b"ln", b"f", ctx()),
        "link": ops.link(f, ROOT, b"ln", ctx()),
        "mknod-fifo": ops.mknod(ROOT, b"p", stat.S_IFIFO | 0o644, 0, ctx()),
    }
    got = {}
    for what, coro in cases.items():
        got[what] = errno.errorcode.get(await fuse_errno(coro))
    assert got == dict.fromkeys(cases, "EROFS")
    # A write through a handle (which a read-only mount never hands out) is refused too.
    fi = await ro.open(f)
    assert await fuse_errno(ops.write(fi.fh, 0, b"x")) == errno.EROFS
    assert await fuse_errno(ops.access(f, os.W_OK, ctx())) == errno.EROFS
    # Reads all work.
    assert await ops.read(fi.fh, 0, 100) == b"content"
    await ops.flush(fi.fh)
    await ops.fsync(fi.fh, False)
    await ops.release(fi.fh)
    assert await ops.access(f, os.R_OK, ctx())
    assert sorted(await ro.listdir(ROOT, monkeypatch)) == ["d", "empty", "f"]
    assert (await ops.lookup(ROOT, b"f", ctx())).st_ino == f
    assert await ops.getxattr(f, b"user.memfs.state", ctx()) == b"pending"
    # Nothing changed.
    assert await ro.read_all(f) == b"content"
    assert sorted(rw.state.nodes[ROOT].children) == ["d", "empty", "f"]


# -- node types ---------------------------------------------------------------------------


async def test_links_symlinks_and_special_files_are_eperm(env):
    _, attr = await env.create(ROOT, "f", b"x")
    assert await fuse_errno(env.ops.link(attr.st_ino, ROOT, b"hard", ctx())) == errno.EPERM
    assert await fuse_errno(env.ops.symlink(ROOT, b"sym", b"f", ctx())) == errno.EPERM
    for kind in (stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK, stat.S_IFSOCK):
        assert await fuse_errno(env.ops.mknod(ROOT, b"node", kind | 0o644, 0,
                                              ctx())) == errno.EPERM
    assert sorted(env.state.nodes[ROOT].children) == ["f"]


async def test_mknod_regular_file(env):
    attr = await env.ops.mknod(ROOT, b"m", stat.S_IFREG | 0o640, 0, ctx())
    assert stat.S_ISREG(attr.st_mode) and stat.S_IMODE(attr.st_mode) == 0o640
    assert attr.st_size == 0
    assert env.reopen_state().lookup_path("/m").sha == EMPTY_SHA
    assert await env.read_all(attr.st_ino) == b""
    assert await fuse_errno(env.ops.mknod(ROOT, b"m", stat.S_IFREG, 0, ctx())) == errno.EEXIST


async def test_create_applies_umask_and_owner(env):
    c = SimpleNamespace(uid=1000, gid=1001, umask=0o022, pid=1)  # RequestContext is read-only
    fi, attr = await env.ops.create(ROOT, b"f", stat.S_IFREG | 0o666, os.O_WRONLY, c)
    await env.ops.release(fi.fh)
    assert (stat.S_IMODE(attr.st_mode), attr.st_uid, attr.st_gid) == (0o644, 1000, 1001)


# -- rename ---------------------------------------------------------------------------------


async def test_rename_plain_keeps_memory_id(env):
    _, attr = await env.create(ROOT, "a.md", b"A")
    env.state.adopt_own_write(env.node("/a.md"), Remote("mem_a", "/a.md", sha256(b"A")))
    d = await env.mkdir(ROOT, "d")
    await env.ops.rename(ROOT, b"a.md", d, b"b.md", 0, ctx())
    assert (await env.ops.lookup(ROOT, b"a.md", ctx())).st_ino == 0
    node = env.node("/d/b.md")
    assert node.ino == attr.st_ino and node.memory_id == "mem_a"
    assert env.state.is_dirty(node)  # path differs from base: an update with a new path
    assert not env.state.tombstones
    assert await env.read_all(node.ino) == b"A"
    fresh = env.reopen_state()
    assert fresh.lookup_path("/d/b.md").memory_id == "mem_a"
    assert fresh.lookup_path("/a.md") is None


async def test_rename_to_itself_is_a_noop(env):
    await env.create(ROOT, "a", b"A")
    await env.ops.rename(ROOT, b"a", ROOT, b"a", 0, ctx())
    assert await env.read_all(env.ino("/a")) == b"A"


async def test_rename_over_existing_keeps_target_memory(env):
    """The editors' atomic save: write x.tmp, rename onto x."""
    _, x = await env.create(ROOT, "x", b"old")
    env.state.adopt_own_write(env.node("/x"), Remote("mem_x", "/x", sha256(b"old")))
    _, tmp = await env.create(ROOT, "x.tmp", b"new")
    env.state.adopt_own_write(env.node("/x.tmp"), Remote("mem_tmp", "/x.tmp", sha256(b"new")))
    await env.ops.rename(ROOT, b"x.tmp", ROOT, b"x", 0, ctx())

    node = env.node("/x")
    assert node.memory_id == "mem_x"
    assert node.sha == sha256(b"new") and node.base_sha == sha256(b"old")
    assert node.base_path == "/x"
    assert env.state.lookup_path("/x.tmp") is None
    assert env.state.by_memory["mem_x"] == node.ino
    assert "mem_tmp" not in env.state.by_memory
    assert set(env.state.tombstones) == {"mem_tmp"}
    assert env.state.tombstones["mem_tmp"].base_path == "/x.tmp"
    assert await env.read_all(node.ino) == b"new"
    # The replaced inode is out of the tree; a request the kernel still sends for it
    # (looked up just before the rename) finds it as it was, with no links.
    assert x.st_ino not in env.state.nodes
    assert (await env.ops.getattr(x.st_ino, ctx())).st_nlink == 0
    fresh = env.reopen_state()
    assert fresh.lookup_path("/x").memory_id == "mem_x"
    assert fresh.lookup_path("/x").sha == sha256(b"new")
    assert set(fresh.tombstones) == {"mem_tmp"}


async def test_rename_over_existing_source_never_synced(env):
    await env.create(ROOT, "x", b"old")
    env.state.adopt_own_write(env.node("/x"), Remote("mem_x", "/x", sha256(b"old")))
    await env.create(ROOT, "x.tmp", b"new")
    await env.ops.rename(ROOT, b"x.tmp", ROOT, b"x", 0, ctx())
    assert env.node("/x").memory_id == "mem_x"
    assert not env.state.tombstones


async def test_rename_over_unsynced_target_keeps_source_memory(env):
    await env.create(ROOT, "x", b"old")  # never reached the server
    await env.create(ROOT, "y", b"new")
    env.state.adopt_own_write(env.node("/y"), Remote("mem_y", "/y", sha256(b"new")))
    await env.ops.rename(ROOT, b"y", ROOT, b"x", 0, ctx())
    assert env.node("/x").memory_id == "mem_y"
    assert not env.state.tombstones


async def test_vim_style_backup_rename_revives_memory(env):
    """vim: mv x x~ (local-only name), write a new x, rm x~."""
    await env.create(ROOT, "x", b"v1")
    env.state.adopt_own_write(env.node("/x"), Remote("mem_x", "/x", sha256(b"v1")))
    await env.ops.rename(ROOT, b"x", ROOT, b"x~", 0, ctx())
    assert set(env.state.tombstones) == {"mem_x"}
    await env.create(ROOT, "x", b"v2")
    await env.ops.unlink(ROOT, b"x~", ctx())
    node = env.node("/x")
    assert node.memory_id == "mem_x" and node.base_sha == sha256(b"v1")
    assert not env.state.tombstones


async def test_rename_over_open_target(env):
    fh, x = await env.create(ROOT, "x", b"old", keep_open=True)
    env.state.adopt_own_write(env.node("/x"), Remote("mem_x", "/x", sha256(b"old")))
    await env.create(ROOT, "x.tmp", b"new")
    await env.ops.rename(ROOT, b"x.tmp", ROOT, b"x", 0, ctx())
    # The replaced inode's handle still reads; its later writes go nowhere.
    assert await env.ops.read(fh, 0, 10) == b"old"
    await env.ops.write(fh, 0, b"OLD")
    await env.ops.release(fh)
    node = env.node("/x")
    assert node.memory_id == "mem_x" and await env.read_all(node.ino) == b"new"
    assert env.reopen_state().lookup_path("/x").sha == sha256(b"new")


async def test_rename_noreplace_without_target(env):
    await env.create(ROOT, "a", b"A")
    await env.ops.rename(ROOT, b"a", ROOT, b"b", pyfuse3.RENAME_NOREPLACE, ctx())
    assert await env.read_all(env.ino("/b")) == b"A"


async def test_rename_errors(env):
    await env.create(ROOT, "f", b"f")
    await env.create(ROOT, "g", b"g")
    d = await env.mkdir(ROOT, "d")
    sub = await env.mkdir(d, "sub")
    full = await env.mkdir(ROOT, "full")
    await env.create(full, "inside")
    await env.mkdir(ROOT, "empty")

    async def rn(p1, n1, p2, n2, flags=0):
        return await fuse_errno(env.ops.rename(p1, n1, p2, n2, flags, ctx()))

    assert await rn(ROOT, b"f", ROOT, b"g", pyfuse3.RENAME_NOREPLACE) == errno.EEXIST
    assert await rn(ROOT, b"f", ROOT, b"g", pyfuse3.RENAME_EXCHANGE) == errno.EINVAL
    assert await rn(ROOT, b"d", sub, b"d") == errno.EINVAL  # into its own subdir
    assert await rn(ROOT, b"d", d, b"x") == errno.EINVAL  # into itself
    assert await rn(ROOT, b"f", ROOT, b"d") == errno.EISDIR  # file over dir
    assert await rn(ROOT, b"d", ROOT, b"f") == errno.ENOTDIR  # dir over file
    assert await rn(ROOT, b"d", ROOT, b"full") == errno.ENOTEMPTY
    assert await rn(ROOT, b"nope", ROOT, b"x") == errno.ENOENT
    assert await rn(ROOT, b"f", env.ino("/f"), b"x") == errno.ENOTDIR
    assert await rn(ROOT, b"f", 9999, b"x") == errno.ENOENT
    assert sorted(env.state.nodes[ROOT].children) == ["d", "empty", "f", "full", "g"]
    # Directory over an empty directory is fine.
    await env.ops.rename(ROOT, b"d", ROOT, b"empty", 0, ctx())
    assert env.state.lookup_path("/empty/sub") is not None
    assert env.state.lookup_path("/d") is None


async def test_directory_rename_moves_every_file(env):
    d = await env.mkdir(ROOT, "d")
    sub = await env.mkdir(d, "sub")
    await env.create(d, "a", b"a")
    await env.create(sub, "b", b"b")
    await env.create(sub, ".b.swp", b"swap")
    env.state.adopt_own_write(env.node("/d/a"), Remote("mem_a", "/d/a", sha256(b"a")))
    env.state.adopt_own_write(env.node("/d/sub/b"), Remote("mem_b", "/d/sub/b", sha256(b"b")))
    e = await env.mkdir(ROOT, "e")
    await env.ops.rename(ROOT, b"d", e, b"moved", 0, ctx())
    got = sorted(env.state.path_of(n) for n in env.state.files())
    assert got == ["/e/moved/a", "/e/moved/sub/.b.swp", "/e/moved/sub/b"]
    assert env.node("/e/moved/a").memory_id == "mem_a"
    assert env.node("/e/moved/sub/b").memory_id == "mem_b"
    assert env.state.is_dirty(env.node("/e/moved/sub/b"))
    assert not env.state.tombstones
    fresh = env.reopen_state()
    assert sorted(fresh.path_of(n) for n in fresh.files()) == got


async def test_rename_file_into_tombstoned_path_revives(env):
    await env.create(ROOT, "x", b"v1")
    env.state.adopt_own_write(env.node("/x"), Remote("mem_x", "/x", sha256(b"v1")))
    await env.ops.unlink(ROOT, b"x", ctx())
    await env.create(ROOT, "new", b"v2")
    await env.ops.rename(ROOT, b"new", ROOT, b"x", 0, ctx())
    assert env.node("/x").memory_id == "mem_x"
    assert not env.state.tombstones


async def _synced(env, name: str, data: bytes, memory_id: str) -> None:
    """A file at the root as a push leaves it: written, and pushed as memory_id."""
    await env.create(ROOT, name, data)
    env.state.adopt_own_write(env.node(f"/{name}"), Remote(memory_id, f"/{name}", sha256(data)))


async def test_a_file_with_a_memory_moved_onto_a_pending_delete_keeps_its_own(env):
    await _synced(env, "a", b"A", "mem_a")
    await _synced(env, "y", b"Y", "mem_y")
    await env.ops.unlink(ROOT, b"a", ctx())
    await env.ops.rename(ROOT, b"y", ROOT, b"a", 0, ctx())
    assert env.node("/a").memory_id == "mem_y"
    assert set(env.state.tombstones) == {"mem_a"}


async def test_a_round_trip_over_another_file_takes_the_first_memory_back(env):
    """mv a c (over c: c's memory takes a's bytes, a's is to be deleted), then mv c a:
    the file at /a holds exactly what a's memory held, so it is a's memory again and
    c's memory is the one deleted; a's history goes on, and a change another writer
    made to a meanwhile is a plain update, not a conflict with a's own bytes."""
    await _synced(env, "a", b"A", "mem_a")
    await _synced(env, "c", b"C", "mem_c")
    await env.ops.rename(ROOT, b"a", ROOT, b"c", 0, ctx())
    assert env.node("/c").memory_id == "mem_c" and set(env.state.tombstones) == {"mem_a"}
    await env.ops.rename(ROOT, b"c", ROOT, b"a", 0, ctx())
    node = env.node("/a")
    assert (node.memory_id, node.base_path, node.base_sha) == ("mem_a", "/a", sha256(b"A"))
    assert not env.state.is_dirty(node)
    assert env.state.by_memory == {"mem_a": node.ino}
    tomb = env.state.tombstones["mem_c"]
    assert set(env.state.tombstones) == {"mem_c"}
    assert (tomb.base_path, tomb.base_sha) == ("/c", sha256(b"C"))
    fresh = env.reopen_state()
    assert fresh.lookup_path("/a").memory_id == "mem_a" and set(fresh.tombstones) == {"mem_c"}


async def test_a_copy_moved_onto_the_deleted_original_takes_its_memory_back(env):
    """cp a c; rm a; mv c a: the same bytes back at a's path are a's memory, unchanged;
    the copy's memory (pushed meanwhile) is deleted. Other bytes keep their own memory
    (above); a temp name takes nothing back."""
    await _synced(env, "a", b"A", "mem_a")
    await _synced(env, "c", b"A", "mem_c")
    await env.ops.unlink(ROOT, b"a", ctx())
    await env.ops.rename(ROOT, b"c", ROOT, b"a", 0, ctx())
    assert env.node("/a").memory_id == "mem_a" and not env.state.is_dirty(env.node("/a"))
    assert set(env.state.tombstones) == {"mem_c"}
    await env.ops.rename(ROOT, b"a", ROOT, b"a~", 0, ctx())  # a temp name: a's memory goes
    await env.ops.rename(ROOT, b"a~", ROOT, b"c", 0, ctx())  # no memory: it revives c's
    assert env.node("/c").memory_id == "mem_c"
    assert set(env.state.tombstones) == {"mem_a"}


# -- unlink / rmdir / mkdir ------------------------------------------------------------------


async def test_unlink_tombstones_and_recreate_revives(env):
    await env.create(ROOT, "m.md", b"v1")
    env.state.adopt_own_write(env.node("/m.md"), Remote("mem_m", "/m.md", sha256(b"v1")))
    await env.ops.unlink(ROOT, b"m.md", ctx())
    assert env.state.lookup_path("/m.md") is None
    tomb = env.state.tombstones["mem_m"]
    assert (tomb.base_path, tomb.base_sha) == ("/m.md", sha256(b"v1"))
    assert "mem_m" in env.reopen_state().tombstones

    await env.create(ROOT, "m.md", b"v2")
    node = env.node("/m.md")
    assert node.memory_id == "mem_m" and node.base_sha == sha256(b"v1")
    assert not env.state.tombstones
    fresh = env.reopen_state()
    assert not fresh.tombstones
    assert fresh.lookup_path("/m.md").memory_id == "mem_m"


async def test_temp_name_does_not_revive(env):
    await env.create(ROOT, "4913", b"v1")  # local-only from the start
    await env.create(ROOT, "y", b"y")
    env.state.adopt_own_write(env.node("/y"), Remote("mem_y", "/y", sha256(b"y")))
    await env.ops.unlink(ROOT, b"y", ctx())
    await env.ops.rename(ROOT, b"4913", ROOT, b"y", 0, ctx())  # a real name now: revives
    assert env.node("/y").memory_id == "mem_y"


async def test_unlink_errors(env):
    d = await env.mkdir(ROOT, "d")
    assert await fuse_errno(env.ops.unlink(ROOT, b"nope", ctx())) == errno.ENOENT
    assert await fuse_errno(env.ops.unlink(ROOT, b"d", ctx())) == errno.EISDIR
    assert await fuse_errno(env.ops.unlink(9999, b"x", ctx())) == errno.ENOENT
    _, f = await env.create(d, "f")
    assert await fuse_errno(env.ops.unlink(f.st_ino, b"x", ctx())) == errno.ENOTDIR


async def test_rmdir(env):
    d = await env.mkdir(ROOT, "d")
    await env.create(d, "f")
    assert await fuse_errno(env.ops.rmdir(ROOT, b"d", ctx())) == errno.ENOTEMPTY
    assert await fuse_errno(env.ops.rmdir(d, b"f", ctx())) == errno.ENOTDIR
    assert await fuse_errno(env.ops.rmdir(ROOT, b"nope", ctx())) == errno.ENOENT
    await env.ops.unlink(d, b"f", ctx())
    await env.ops.rmdir(ROOT, b"d", ctx())
    assert env.state.lookup_path("/d") is None
    assert env.reopen_state().lookup_path("/d") is None


async def test_mkdir_is_persistent_and_local_only(env):
    d = await env.mkdir(ROOT, "proj", 0o750)
    sub = await env.mkdir(d, "sub")
    attr = await env.ops.getattr(d, ctx())
    assert stat.S_ISDIR(attr.st_mode) and stat.S_IMODE(attr.st_mode) == 0o750
    assert attr.st_nlink == 3
    assert await fuse_errno(env.ops.mkdir(ROOT, b"proj", 0o755, ctx())) == errno.EEXIST
    await env.create(ROOT, "file")
    assert await fuse_errno(env.ops.mkdir(ROOT, b"file", 0o755, ctx())) == errno.EEXIST
    assert await fuse_errno(env.ops.create(ROOT, b"proj", stat.S_IFREG, 0, ctx())) \
        == errno.EEXIST
    assert await fuse_errno(env.ops.mkdir(env.ino("/file"), b"x", 0o755, ctx())) \
        == errno.ENOTDIR
    assert await env.ops.getxattr(d, b"user.memfs.state", ctx()) == b"directory"
    s = await env.ops.statfs(ctx())
    assert s.f_ffree == 1999  # directories are not memories
    fresh = env.reopen_state()
    node = fresh.lookup_path("/proj/sub")
    assert node is not None and node.is_dir and node.ino == sub


async def test_unlink_while_open_keeps_the_handle_working(env):
    fh, attr = await env.create(ROOT, "f", b"still here", keep_open=True)
    env.state.adopt_own_write(env.node("/f"), Remote("mem_f", "/f", sha256(b"still here")))
    await env.ops.unlink(ROOT, b"f", ctx())
    assert (await env.ops.lookup(ROOT, b"f", ctx())).st_ino == 0
    assert await env.ops.read(fh, 0, 100) == b"still here"
    assert (await env.ops.getattr(attr.st_ino, ctx())).st_nlink == 0
    assert await env.ops.write(fh, 0, b"STILL") == 5
    await env.ops.flush(fh)
    assert await env.ops.read(fh, 0, 100) == b"STILL here"
    # The unlinked file does not come back.
    assert "mem_f" in env.state.tombstones
    assert env.reopen_state().lookup_path("/f") is None
    await env.ops.release(fh)
    assert attr.st_ino not in env.fs.files._open
    # Still answered as it was (no links) while the kernel may hold it; after
    # GONE_KEPT further removals it is unknown: ENOENT.
    assert (await env.ops.getattr(attr.st_ino, ctx())).st_nlink == 0
    from memfs.mount.open_files import GONE_KEPT
    for i in range(GONE_KEPT):
        env.fs.files.unfast(10**9 + i, env.node("/"))  # stand-ins for later removals
    assert await fuse_errno(env.ops.getattr(attr.st_ino, ctx())) == errno.ENOENT
    # A new file at the same path is a different inode (reviving the memory).
    _, again = await env.create(ROOT, "f", b"new")
    assert again.st_ino != attr.st_ino
    assert env.node("/f").memory_id == "mem_f"


async def test_unlink_while_open_twice_opened(env):
    fh1, attr = await env.create(ROOT, "f", b"abc", keep_open=True)
    fi2 = await env.open(attr.st_ino)
    await env.ops.unlink(ROOT, b"f", ctx())
    await env.ops.release(fh1)
    assert await env.ops.read(fi2.fh, 0, 10) == b"abc"
    await env.ops.release(fi2.fh)


# -- lookup / getattr / readdir ------------------------------------------------------------


async def test_lookup_and_timeouts(env):
    _, attr = await env.create(ROOT, "f", b"xyz")
    e = await env.ops.lookup(ROOT, b"f", ctx())
    assert e.st_ino == attr.st_ino and e.st_size == 3
    assert e.attr_timeout == 300 and e.entry_timeout == 300
    neg = await env.ops.lookup(ROOT, b"missing", ctx())
    assert neg.st_ino == 0 and neg.entry_timeout == 1
    assert await fuse_errno(env.ops.lookup(attr.st_ino, b"x", ctx())) == errno.ENOTDIR
    assert await fuse_errno(env.ops.getattr(12345, ctx())) == errno.ENOENT
    root = await env.ops.getattr(ROOT, ctx())
    assert stat.S_ISDIR(root.st_mode)


async def test_readdir(env, monkeypatch):
    for name in ("b", "a", "c"):
        await env.create(ROOT, name)
    await env.mkdir(ROOT, "dir")
    assert await env.listdir(ROOT, monkeypatch) == ["a", "b", "c", "dir"]

    # Resuming at an offset; stopping when the buffer is full.
    seen = []

    def reply(token, name, attr, next_id):
        seen.append((name, next_id))
        return len(seen) < 2

    monkeypatch.setattr(pyfuse3, "readdir_reply", reply)
    fh = await env.ops.opendir(ROOT, ctx())
    await env.ops.readdir(fh, 0, None)
    assert seen == [(b"a", 1), (b"b", 2)]
    await env.ops.unlink(ROOT, b"c", ctx())  # removed since opendir: skipped
    seen.clear()
    await env.ops.readdir(fh, 2, None)
    assert seen == [(b"dir", 4)]
    await env.ops.releasedir(fh)
    assert await fuse_errno(env.ops.opendir(env.ino("/a"), ctx())) == errno.ENOTDIR


async def test_open_directory_is_eisdir(env):
    d = await env.mkdir(ROOT, "d")
    assert await fuse_errno(env.ops.open(d, os.O_RDONLY, ctx())) == errno.EISDIR


# -- xattrs ----------------------------------------------------------------------------------


async def test_xattrs(env):
    _, attr = await env.create(ROOT, "f", b"content")
    ino = attr.st_ino
    get = env.ops.getxattr
    assert await get(ino, b"user.memfs.state", ctx()) == b"pending"
    assert await get(ino, b"user.memfs.sha256", ctx()) == sha256(b"content").encode()
    assert await fuse_errno(get(ino, b"user.memfs.memory_id", ctx())) == pyfuse3.ENOATTR
    assert await fuse_errno(get(ino, b"user.other", ctx())) == pyfuse3.ENOATTR

    env.state.adopt_own_write(env.node("/f"), Remote("mem_f", "/f", sha256(b"content")))
    assert await get(ino, b"user.memfs.state", ctx()) == b"synced"
    assert await get(ino, b"user.memfs.memory_id", ctx()) == b"mem_f"
    names = await env.ops.listxattr(ino, ctx())
    assert {b"user.memfs.state", b"user.memfs.memory_id", b"user.memfs.sha256",
            b"user.memfs.base_sha256"} <= set(names)

    await env.write_file(ino, b"changed")
    assert await get(ino, b"user.memfs.state", ctx()) == b"pending"

    node = env.node("/f")
    env.state.refuse_locally(node, "content is not valid UTF-8 (byte 0)")
    assert await get(ino, b"user.memfs.state", ctx()) == b"refused"
    assert await get(ino, b"user.memfs.reason", ctx()) == b"content is not valid UTF-8 (byte 0)"
    await env.write_file(ino, b"fixed")  # new content: no longer refused
    assert await get(ino, b"user.memfs.state", ctx()) == b"pending"

    _, swp = await env.create(ROOT, ".a.swp", b"swap")
    assert await get(swp.st_ino, b"user.memfs.state", ctx()) == b"local-only"
    assert b"temp" in await get(swp.st_ino, b"user.memfs.reason", ctx())

    for name in (b"user.memfs.state", b"user.memfs.memory_id", b"user.memfs.new"):
        # Computed, never stored: a write is taken and changes nothing (rsync -X, cp).
        await env.ops.setxattr(ino, name, b"x", ctx())
        await env.ops.removexattr(ino, name, ctx())
    assert await get(ino, b"user.memfs.state", ctx()) == b"pending"
    assert await fuse_errno(env.ops.setxattr(ino, b"user.other", b"x", ctx())) \
        == errno.ENOTSUP
    assert await fuse_errno(env.ops.removexattr(ino, b"user.other", ctx())) == pyfuse3.ENOATTR


# -- statfs ---------------------------------------------------------------------------------


async def test_statfs(env):
    s = await env.ops.statfs(ctx())
    assert s.f_files == 2000 and s.f_ffree == 2000 and s.f_favail == 2000
    assert s.f_bsize == 4096
    assert s.f_blocks == 2000 * MAX // 4096 and s.f_bfree == s.f_blocks
    await env.create(ROOT, "a", b"x" * 5000)
    s2 = await env.ops.statfs(ctx())
    assert s2.f_ffree == 1999 and s2.f_bfree == s.f_blocks - 2
    await env.create(ROOT, "b")
    assert (await env.ops.statfs(ctx())).f_ffree == 1998
    await env.create(ROOT, ".b.swp")  # local-only: not a memory
    assert (await env.ops.statfs(ctx())).f_ffree == 1998
    await env.ops.unlink(ROOT, b"a", ctx())
    assert (await env.ops.statfs(ctx())).f_ffree == 1999


# -- cache miss, fetch, keep_cache -------------------------------------------------------


def _remote_file(env: FsEnv, name: str, content: bytes, memory_id: str) -> int:
    """A clean file the reconciler added: base known, content not in the cache."""
    node = env.state.new_node(env.state.nodes[ROOT], name, is_dir=False,
                              mode=stat.S_IFREG | 0o644, uid=0, gid=0)
    sha = sha256(content)
    env.state.set_content(node, sha, len(content))
    env.state.adopt_own_write(node, Remote(memory_id, "/" + name, sha))
    return node.ino


async def test_cache_miss_fetches(tmp_path):
    calls = []

    async def fetch(node):
        calls.append(node.memory_id)
        return b"from server"

    env = FsEnv.make(tmp_path, fetch=fetch)
    ino = _remote_file(env, "r", b"from server", "mem_r")
    assert await env.read_all(ino) == b"from server"
    assert calls == ["mem_r"]
    # Writing to an uncached file fetches first, then patches.
    fi = await env.open(ino, os.O_WRONLY)
    await env.ops.write(fi.fh, 0, b"FROM")
    await env.ops.release(fi.fh)
    assert await env.read_all(ino) == b"FROM server"
    assert calls == ["mem_r", "mem_r"]


async def test_failing_fetch_is_eio_and_loses_nothing(tmp_path):
    async def fetch(node):
        raise ConnectionError("offline")

    env = FsEnv.make(tmp_path, fetch=fetch)
    ino = _remote_file(env, "r", b"from server", "mem_r")
    fi = await env.open(ino)
    assert await fuse_errno(env.ops.read(fi.fh, 0, 100)) == errno.EIO
    await env.ops.release(fi.fh)
    fi = await env.open(ino, os.O_WRONLY)
    assert await fuse_errno(env.ops.write(fi.fh, 0, b"x")) == errno.EIO
    await env.ops.release(fi.fh)
    node = env.node("/r")
    assert node.sha == sha256(b"from server") and not env.state.is_dirty(node)


async def test_a_fetch_that_cannot_bring_the_content_is_eio_never_other_bytes(tmp_path):
    """A dirty file whose blob is missing is asked of the fetcher (it may know a memory
    that held that sha); what comes back must hash to the file's sha, else EIO."""
    calls = []

    async def fetch(node):
        calls.append(node)
        return b"base"  # the server's content: not this file's

    env = FsEnv.make(tmp_path, fetch=fetch)
    ino = _remote_file(env, "r", b"base", "mem_r")
    env.state.set_content(env.node("/r"), sha256(b"lost local"), 10)  # dirty, blob missing
    assert await fuse_errno(env.read_all(ino)) == errno.EIO
    assert len(calls) == 1


async def test_keep_cache_only_when_sha_unchanged(env):
    _, attr = await env.create(ROOT, "f", b"v1")
    ino = attr.st_ino
    fi = await env.open(ino)
    assert fi.keep_cache is True  # same sha as at create/close
    await env.ops.release(fi.fh)
    fi = await env.open(ino)
    assert fi.keep_cache is True
    await env.ops.release(fi.fh)
    # A remote change (the reconciler moves sha + base, then invalidates).
    node = env.node("/f")
    env.cache.put(b"v2")
    env.state.set_content(node, sha256(b"v2"), 2)
    fi = await env.open(ino)
    assert fi.keep_cache is False
    assert await env.ops.read(fi.fh, 0, 10) == b"v2"
    await env.ops.release(fi.fh)
    fi = await env.open(ino)
    assert fi.keep_cache is True
    await env.ops.release(fi.fh)


async def test_keep_cache_false_on_first_open_of_remote_file(tmp_path):
    async def fetch(node):
        return b"r"

    env = FsEnv.make(tmp_path, fetch=fetch)
    ino = _remote_file(env, "r", b"r", "mem_r")
    fi = await env.open(ino)
    assert fi.keep_cache is False
    await env.ops.release(fi.fh)


async def test_create_returns_no_keep_cache(env):
    fi, attr = await env.ops.create(ROOT, b"f", stat.S_IFREG | 0o644, os.O_RDWR, ctx())
    assert fi.keep_cache is False
    await env.ops.release(fi.fh)


# -- robustness and ordering ----------------------------------------------------------------


async def test_cp_p_futimens_before_close_keeps_mtime(env):
    """cp -p / install -p set times on the open fd, then close: close must not bump mtime."""
    fh, attr = await env.create(ROOT, "copy", keep_open=True)
    await env.ops.write(fh, 0, b"payload")
    await env.ops.setattr(attr.st_ino, attrs(st_atime_ns=10**9, st_mtime_ns=2 * 10**9),
                          Fields(update_atime=True, update_mtime=True), fh, ctx())
    await env.ops.flush(fh)
    await env.ops.release(fh)
    out = await env.ops.getattr(attr.st_ino, ctx())
    assert out.st_mtime_ns == 2 * 10**9 and out.st_size == 7
    node = env.reopen_state().lookup_path("/copy")
    assert node.mtime_ns == 2 * 10**9 and node.sha == sha256(b"payload")


async def test_local_disk_error_on_close_is_reported_and_loses_nothing(env):
    """A full disk under staged.db (SQLite's own SQLITE_FULL, made real by capping the
    database's pages) is ENOSPC for close and fsync; the data stays buffered."""
    fh, attr = await env.create(ROOT, "f", b"v1", keep_open=True)
    await env.ops.write(fh, 0, b"v2")
    staging = env.cache._staging()
    pages = staging.execute("PRAGMA page_count").fetchone()[0]
    staging.execute(f"PRAGMA max_page_count={pages}")
    await env.ops.write(fh, 0, b"v2" * 3000)  # more than the free pages hold
    assert await fuse_errno(env.ops.flush(fh)) == errno.ENOSPC
    assert await fuse_errno(env.ops.fsync(fh, False)) == errno.ENOSPC
    assert await fuse_errno(env.ops.release(fh)) == errno.ENOSPC
    # Still buffered: a new open sees it, and the next close persists it.
    staging.execute("PRAGMA max_page_count=1073741823")
    assert await env.read_all(attr.st_ino) == b"v2" * 3000
    assert env.reopen_state().lookup_path("/f").sha == sha256(b"v2" * 3000)
    assert BlobCache(env.cache.root).get(sha256(b"v2" * 3000)) == b"v2" * 3000


async def test_fsync_after_close_syncs_the_blob(env, monkeypatch):
    fh, attr = await env.create(ROOT, "f", b"data", keep_open=True)  # flushed, not fsynced
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    await env.ops.fsync(fh, False)
    assert synced, "fsync must reach the blob written by an earlier close"
    await env.ops.release(fh)


async def test_empty_file_reads_without_blob(env):
    """The empty blob is never stored (a create costs no blob at all)."""
    _, attr = await env.create(ROOT, "empty")
    env.cache.lru.clear()
    assert not env.cache._path(EMPTY_SHA).exists() and not env.cache.staged()
    assert await env.read_all(attr.st_ino) == b""


async def test_concurrent_writes_during_fetch_are_not_lost(tmp_path):
    gate = trio.Event()

    async def slow_fetch(node):
        await gate.wait()
        return b"0123456789"

    env = FsEnv.make(tmp_path, fetch=slow_fetch)
    ino = _remote_file(env, "r", b"0123456789", "mem_r")
    fi = await env.open(ino, os.O_WRONLY)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(env.ops.write, fi.fh, 0, b"A")
        nursery.start_soon(env.ops.write, fi.fh, 5, b"B")
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    await env.ops.release(fi.fh)
    assert await env.read_all(ino) == b"A1234B6789"


async def test_failed_commit_leaves_no_trace(env):
    """A commit that fails (disk full, I/O error) costs the request an EIO and leaves
    the tree as state.db has it: nothing shown that was not made durable."""
    await env.create(ROOT, "a.md", b"A")
    env.state.adopt_own_write(env.node("/a.md"), Remote("mem_a", "/a.md", sha256(b"A")))
    # Any write of a row named 'boom' fails inside the transaction, as a full disk would.
    env.state.db.execute(
        "CREATE TEMP TRIGGER boom BEFORE INSERT ON nodes WHEN NEW.name = 'boom' "
        "BEGIN SELECT RAISE(ABORT, 'simulated disk failure'); END")
    assert await fuse_errno(env.ops.create(ROOT, b"boom", 0o644, os.O_RDWR, ctx())) == errno.EIO
    assert (await env.ops.lookup(ROOT, b"boom", ctx())).st_ino == 0
    assert await fuse_errno(env.ops.rename(ROOT, b"a.md", ROOT, b"boom", 0, ctx())) == errno.EIO
    node = env.node("/a.md")  # still where it was, with its memory
    assert node.memory_id == "mem_a" and env.state.by_memory["mem_a"] == node.ino
    assert env.state.lookup_path("/boom") is None
    assert await env.read_all(node.ino) == b"A"
    fresh = env.reopen_state()
    assert sorted(fresh.nodes[ROOT].children) == sorted(env.state.nodes[ROOT].children)
    # The mount goes on working.
    await env.create(ROOT, "b.md", b"B")
    assert await env.read_all(env.node("/b.md").ino) == b"B"


async def test_an_open_racing_a_rename_over_finds_the_replaced_file(env):
    """The kernel looked `a.md` up (old inode) just before an editor renamed its temp file
    over it; the OPEN and GETATTR that follow must find the old file as it was, as on a
    local filesystem, not ENOENT."""
    await env.create(ROOT, "a.md", b"old\n")
    old = env.ino("/a.md")
    await env.create(ROOT, ".a.md.tmp", b"new\n")
    await env.ops.rename(ROOT, b".a.md.tmp", ROOT, b"a.md", 0, ctx())
    assert old not in env.state.nodes
    assert (await env.ops.getattr(old, ctx())).st_size == 4
    fi = await env.open(old)
    assert await env.ops.read(fi.fh, 0, 100) == b"old\n"
    await env.ops.release(fi.fh)
    assert await env.read_all(env.ino("/a.md")) == b"new\n"
    # Writes through such a handle go nowhere (the file is gone), as after an unlink.
    w = await env.open(old, os.O_WRONLY)
    await env.ops.write(w.fh, 0, b"lost\n")
    await env.ops.flush(w.fh)
    await env.ops.release(w.fh)
    assert await env.read_all(env.ino("/a.md")) == b"new\n"


async def test_a_name_over_255_bytes_is_enametoolong_in_every_handler(env):
    """f_namemax is 255: every handler that takes a name answers a longer one with
    ENAMETOOLONG, as every Linux filesystem does; 255 bytes (also in UTF-8) is fine."""
    long, mode = b"n" * 256, stat.S_IFREG | 0o644
    _, attr = await env.create(ROOT, "ok")
    d = await env.mkdir(ROOT, "d")
    calls = {
        "lookup": env.ops.lookup(ROOT, long, ctx()),
        "create": env.ops.create(ROOT, long, mode, os.O_WRONLY, ctx()),
        "mknod": env.ops.mknod(ROOT, long, mode, 0, ctx()),
        "mkdir": env.ops.mkdir(ROOT, long, 0o755, ctx()),
        "rename to": env.ops.rename(ROOT, b"ok", d, long, 0, ctx()),
        "rename from": env.ops.rename(ROOT, long, d, b"x", 0, ctx()),
        "unlink": env.ops.unlink(ROOT, long, ctx()),
        "rmdir": env.ops.rmdir(ROOT, long, ctx()),
        "symlink": env.ops.symlink(ROOT, long, b"target", ctx()),
        "link": env.ops.link(attr.st_ino, d, long, ctx()),
    }
    for what, call in calls.items():
        assert await fuse_errno(call) == errno.ENAMETOOLONG, what
    assert env.state.lookup_path("/ok") is not None
    await env.create(ROOT, "\u00e9" * 127 + "x")  # 255 bytes in UTF-8
    assert await fuse_errno(env.ops.create(ROOT, ("\u00e9" * 128).encode(), mode, os.O_WRONLY,
                                           ctx())) == errno.ENAMETOOLONG  # 256 bytes
    assert (await env.ops.statfs(ctx())).f_namemax == 255
