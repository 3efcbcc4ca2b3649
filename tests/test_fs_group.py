"""Handler-level tests of the session root (memfs/mount/router.py, session_root.py), without
the kernel:
inode and handle numbering across stores, the marker, EROFS at the root, EXDEV
between stores, per-store read-only. The same behaviour through a real mount is in
test_group_mount.py and test_session_mount.py."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time

import pyfuse3
import pytest
from fs_helpers import ctx, fuse_errno

from memfs.core.metrics import FuseTiming
from memfs.mount.fastopen import FAST_BIT
from memfs.mount.marker import MARKER_INO, MARKER_NAME, marker_content
from memfs.mount.router import SHIFT, Router
from memfs.mount.session_root import GROUP_ROOT
from memfs.mount.store_fs import StoreFS
from memfs.mount.versions import FH_BASE, INO_MIN, VERSIONS_INO
from memfs.state.blobs import BlobCache
from memfs.state.state import ROOT_INO, State


@pytest.fixture
def group(tmp_path):
    states = []
    g = Router(session_owner=(1234, 5678))
    for name, read_only in (("alpha", False), ("beta", True)):
        d = tmp_path / name
        d.mkdir()
        state = State(d / "state.db")
        states.append(state)
        g.add(StoreFS(state, BlobCache(d / "objects"), read_only=read_only,
                      marker=marker_content(f"memstore_{name}"), owner=(1234, 5678)), name)
    yield g
    for s in states:
        s.close()


async def listdir(g: Router, ino: int, monkeypatch) -> dict[str, int]:
    got: dict[str, int] = {}

    def reply(token, name, attr, next_id):
        got[name.decode()] = attr.st_ino
        return True

    monkeypatch.setattr(pyfuse3, "readdir_reply", reply)
    fh = await g.opendir(ino, ctx())
    await g.readdir(fh, 0, None)
    await g.releasedir(fh)
    return got


async def test_root_lists_stores_with_their_own_inode_ranges(group, monkeypatch):
    root = await listdir(group, GROUP_ROOT, monkeypatch)
    assert root == {"alpha": 1 << SHIFT | ROOT_INO, "beta": 2 << SHIFT | ROOT_INO}
    attr = await group.getattr(GROUP_ROOT, ctx())
    assert stat.S_ISDIR(attr.st_mode) and (attr.st_uid, attr.st_gid) == (1234, 5678)
    alpha = await group.lookup(GROUP_ROOT, b"alpha", ctx())
    assert alpha.st_ino == root["alpha"] and (alpha.st_uid, alpha.st_gid) == (1234, 5678)
    assert (await group.lookup(GROUP_ROOT, b"nope", ctx())).st_ino == 0
    assert (await group.lookup(root["alpha"], b"..", ctx())).st_ino == GROUP_ROOT


async def test_files_and_handles_are_renumbered_per_store(group, monkeypatch):
    alpha = 1 << SHIFT | ROOT_INO
    fi, attr = await group.create(alpha, b"a.md", stat.S_IFREG | 0o644, os.O_WRONLY, ctx())
    assert attr.st_ino >> SHIFT == 1 and fi.fh >> SHIFT == 1
    assert await group.write(fi.fh, 0, b"hello") == 5
    await group.flush(fi.fh)
    await group.release(fi.fh)
    again = await group.lookup(alpha, b"a.md", ctx())
    assert again.st_ino == attr.st_ino and again.st_size == 5
    fi = await group.open(attr.st_ino, os.O_RDONLY, ctx())
    assert await group.read(fi.fh, 0, 100) == b"hello"
    await group.release(fi.fh)
    listing = await listdir(group, alpha, monkeypatch)
    assert listing == {MARKER_NAME: 1 << SHIFT | MARKER_INO, "a.md": attr.st_ino}


async def test_marker_is_read_only_virtual_file(group):
    beta = 2 << SHIFT | ROOT_INO
    attr = await group.lookup(beta, MARKER_NAME.encode(), ctx())
    assert attr.st_ino == 2 << SHIFT | MARKER_INO and stat.S_IMODE(attr.st_mode) == 0o444
    fi = await group.open(attr.st_ino, os.O_RDONLY, ctx())
    assert await group.read(fi.fh, 0, 100) == b"version 1\nmemstore_beta"
    await group.release(fi.fh)
    alpha = 1 << SHIFT | ROOT_INO
    marker = 1 << SHIFT | MARKER_INO
    assert await fuse_errno(group.open(marker, os.O_WRONLY, ctx())) == errno.EROFS
    assert await fuse_errno(group.unlink(alpha, MARKER_NAME.encode(), ctx())) == errno.EROFS
    assert await fuse_errno(group.create(alpha, MARKER_NAME.encode(), 0o100644, os.O_WRONLY,
                                         ctx())) == errno.EEXIST
    assert await fuse_errno(group.rename(alpha, MARKER_NAME.encode(), alpha, b"m", 0,
                                         ctx())) == errno.EROFS


async def test_root_refuses_changes_and_stores_do_not_mix(group):
    for call in (group.mkdir(GROUP_ROOT, b"d", 0o40755, ctx()),
                 group.create(GROUP_ROOT, b"f", 0o100644, os.O_WRONLY, ctx()),
                 group.unlink(GROUP_ROOT, b"alpha", ctx()),
                 group.rmdir(GROUP_ROOT, b"alpha", ctx()),
                 group.rename(GROUP_ROOT, b"alpha", GROUP_ROOT, b"x", 0, ctx()),
                 group.setxattr(GROUP_ROOT, b"user.x", b"1", ctx())):
        assert await fuse_errno(call) == errno.EROFS
    assert await fuse_errno(group.access(GROUP_ROOT, os.W_OK, ctx())) == errno.EROFS
    alpha, beta = 1 << SHIFT | ROOT_INO, 2 << SHIFT | ROOT_INO
    fi, _ = await group.create(alpha, b"a.md", 0o100644, os.O_WRONLY, ctx())
    await group.release(fi.fh)
    assert await fuse_errno(group.rename(alpha, b"a.md", beta, b"a.md", 0,
                                         ctx())) == errno.EXDEV
    # beta is read-only: every change is EROFS, reads work.
    assert await fuse_errno(group.create(beta, b"b.md", 0o100644, os.O_WRONLY,
                                         ctx())) == errno.EROFS
    assert await fuse_errno(group.mkdir(beta, b"d", 0o40755, ctx())) == errno.EROFS
    # An unknown store's numbers are ENOENT, never another store's file.
    assert await fuse_errno(group.getattr(9 << SHIFT | ROOT_INO, ctx())) == errno.ENOENT


async def test_numbers_no_part_gave_out(group, monkeypatch):
    """docs/SEMANTICS.md, "Numbers no part gave out": the kernel only sends numbers memfs
    gave it, but the router still answers any other with ENOENT (a change in the
    version-history range of a store without that tree: EROFS), and a handler's
    unexpected exception with EIO, never by ending the mount."""
    alpha = 1 << SHIFT
    for call in (group.getattr(9 << SHIFT | ROOT_INO, ctx()),        # no such store
                 group.read(9 << SHIFT | 3, 0, 10),                   # a handle there
                 group.read(FAST_BIT | 0, 0, 10),                     # a fast handle, root
                 group.getattr(alpha | INO_MIN, ctx()),               # no versions tree
                 group.lookup(alpha | VERSIONS_INO, b"x", ctx()),
                 group.read(alpha | FH_BASE, 0, 10)):
        assert await fuse_errno(call) == errno.ENOENT
    assert await fuse_errno(group.unlink(alpha | INO_MIN, b"x", ctx())) == errno.EROFS

    async def broken(*args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(group.slots[1].fs.tree, "getattr", broken)
    assert await fuse_errno(group.getattr(alpha | ROOT_INO, ctx())) == errno.EIO
    assert (await group.getattr(2 << SHIFT | ROOT_INO, ctx())).st_ino  # the rest goes on


async def test_every_request_notes_the_mounts_one_idle_clock(group):
    """The clock each engine hands its SyncContext (the blob writer and the pusher wait for a
    quiet mount): a request to any store or to the root counts, answered or refused."""
    alpha, beta = 1 << SHIFT | ROOT_INO, 2 << SHIFT | ROOT_INO
    for call in (lambda: group.getattr(GROUP_ROOT, ctx()),
                 lambda: group.getattr(alpha, ctx()),
                 lambda: group.lookup(beta, b"nope.md", ctx()),
                 lambda: group.mkdir(beta, b"d", 0o40755, ctx()),  # EROFS
                 lambda: group.getattr(9 << SHIFT | ROOT_INO, ctx())):  # ENOENT
        group.clock.busy_at = 0.0
        assert group.clock.idle_for() > 0.0
        before = time.monotonic()
        with contextlib.suppress(pyfuse3.FUSEError):
            await call()
        assert group.clock.busy_at >= before


async def test_a_request_is_timed_in_its_own_stores_counters(group):
    """`--metrics-addr`: each store counts the requests for its numbers, errors by errno;
    the root's own requests are no store's."""
    alpha, beta = group.slots[1].fs, group.slots[2].fs
    alpha.timing, beta.timing = FuseTiming(), FuseTiming()
    await group.getattr(1 << SHIFT | ROOT_INO, ctx())
    await group.getattr(GROUP_ROOT, ctx())
    assert await fuse_errno(group.mkdir(2 << SHIFT | ROOT_INO, b"d", 0o40755,
                                        ctx())) == errno.EROFS
    assert set(alpha.timing.ops) == {"getattr"} and not alpha.timing.errors
    assert set(beta.timing.ops) == {"mkdir"}
    assert beta.timing.errors == {("mkdir", "EROFS"): 1}


async def test_a_plain_mount_holds_one_unnamed_store(tmp_path):
    state = State(tmp_path / "state.db")
    try:
        ops = Router()
        fs = StoreFS(state, BlobCache(tmp_path / "objects"))
        assert ops.add(fs).base == 0 and fs.ino_base == 0
        with pytest.raises(ValueError):
            ops.add(StoreFS(state, BlobCache(tmp_path / "objects")))
        with pytest.raises(ValueError):
            Router(session_owner=(0, 0)).add(fs)  # a session root names its stores
        assert (await ops.getattr(ROOT_INO, ctx())).st_ino == ROOT_INO
    finally:
        state.close()
