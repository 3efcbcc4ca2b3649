"""Handler-level tests of the read-only `.memfs/versions` tree (memfs/mount/versions.py),
without the kernel: a fake versions API, through the real router.

docs/SEMANTICS.md ("The .memfs tree") is the specification."""

from __future__ import annotations

import dataclasses
import errno
import os
import stat

import pytest
from fs_helpers import ROOT, Fields, attrs, b, ctx, fuse_errno, mount_ops

from memfs.api.models import MemoryVersion
from memfs.core import decide
from memfs.mount import versions as fs_versions
from memfs.mount.versions import META_INO, VERSIONS_INO, VersionsTree, is_virtual, version_name
from memfs.state.blobs import BlobCache, sha256
from memfs.state.state import State

STORE = "memstore_1"


def ver(vid, mid, op, path, content, when, *, redacted=False, actor=None):
    data = None if content is None else content
    return MemoryVersion(
        id=vid, memory_store_id=STORE, memory_id=mid, operation=op,
        path=None if redacted else path,
        content=None if redacted or op == "deleted" else data,
        content_size_bytes=None if redacted or op == "deleted" else len(data.encode()),
        content_sha256=(None if redacted or op == "deleted"
                        else sha256(data.encode())),
        created_by=actor or {"type": "api_actor", "api_key_id": "apikey_x"},
        created_at=f"2026-11-30T22:{when}Z",
        redacted_at="2026-12-01T00:00:00Z" if redacted else None)


class FakeClient:
    """list_versions (newest first, created_gte honoured) and get_version."""

    def __init__(self, versions):
        self.versions = {v.id: v for v in versions}
        self.list_calls = 0
        self.get_calls = 0
        self.corrupt = False

    async def list_versions(self, store_id, *, created_gte=None, limit=100, **kw):
        self.list_calls += 1
        rows = sorted(self.versions.values(), key=fs_versions._order, reverse=True)
        for v in rows:
            if created_gte and fs_versions.parse_time(v.created_at) < \
                    fs_versions.parse_time(created_gte):
                continue
            yield MemoryVersion(**{**v.__dict__, "content": None})

    async def get_version(self, store_id, vid, *, view="full"):
        self.get_calls += 1
        if vid not in self.versions:
            raise RuntimeError("404")
        v = self.versions[vid]
        if self.corrupt and v.content is not None:
            return MemoryVersion(**{**v.__dict__, "content": v.content + "x"})
        return v


HISTORY = [
    ver("memver_a1", "mem_a", "created", "/notes/a.md", "one\n", "00:01.000000"),
    ver("memver_a2", "mem_a", "modified", "/notes/a.md", "two\n", "00:02.000000"),
    ver("memver_a3", "mem_a", "modified", "/notes/b.md", "two\n", "00:03.000000"),  # rename
    ver("memver_x1", "mem_x", "created", "/x.md", "gone soon\n", "00:04.000000"),
    ver("memver_x2", "mem_x", "deleted", "/x.md", None, "00:05.000000"),
    ver("memver_r1", "mem_r", "created", "/r.md", "secret\n", "00:06.000000", redacted=True),
    ver("memver_r2", "mem_r", "modified", "/r.md", "public\n", "00:07.000000"),
]


@pytest.fixture
def env(tmp_path):
    state = State(tmp_path / "state.db")
    cache = BlobCache(tmp_path / "objects")
    client = FakeClient(HISTORY)
    tree = VersionsTree(client, STORE, cache)
    ops = mount_ops(state, cache, versions=tree)
    yield ops, tree, client, cache
    state.close()


async def listdir(ops, ino, monkeypatch) -> list[str]:
    got = []

    def reply(token, name, attr, next_id):
        got.append(name.decode())
        return True

    monkeypatch.setattr(fs_versions.pyfuse3, "readdir_reply", reply)
    fh = await ops.opendir(ino, ctx())
    await ops.readdir(fh, 0, None)
    await ops.releasedir(fh)
    return got


async def walk(ops, *names) -> int:
    ino = ROOT
    for name in names:
        e = await ops.lookup(ino, b(name), ctx())
        assert e.st_ino, f"{name} not found"
        ino = e.st_ino
    return ino


async def read(ops, ino) -> bytes:
    fi = await ops.open(ino, os.O_RDONLY, ctx())
    try:
        return await ops.read(fi.fh, 0, 1 << 20)
    finally:
        await ops.release(fi.fh)


def test_names_sort_by_time_and_say_deleted_or_redacted():
    names = [version_name(v) for v in HISTORY]
    assert names[0] == "2026-11-30T22-00-01.000Z-memver_a1"
    assert names[4].endswith("-memver_x2-deleted")
    assert names[5].endswith("-memver_r1-redacted")
    assert sorted(names) == names  # the history is in time order
    for n in names:
        assert "/" not in n and ":" not in n


def test_history_times_match_the_version_names():
    """`memfs history` and the tree parse the API's times with one parser
    (memfs.api.models.parse_time): the same millisecond, in UTC, whatever the offset."""
    from memfs.cli.history import _when

    v = dataclasses.replace(ver("memver_t", "mem_t", "created", "/t.md", "x", "00:00"),
                            created_at="2026-11-30T23:30:00.123456+01:30")
    assert version_name(v).startswith("2026-11-30T22-00-00.123Z-")
    assert _when(v.created_at) == "2026-11-30T22:00:00.123Z"
    assert _when("2026-11-30T22:00:00Z") == "2026-11-30T22:00:00.000Z"
    assert _when("not a time") == "not a time"  # shown as the server sent it


async def test_meta_is_hidden_from_root_listing_but_reachable(env, monkeypatch):
    ops, tree, client, _ = env
    assert ".memfs" not in await listdir(ops, ROOT, monkeypatch)
    e = await ops.lookup(ROOT, b".memfs", ctx())
    assert e.st_ino == META_INO and stat.S_ISDIR(e.st_mode) and e.st_mode & 0o777 == 0o700
    assert await listdir(ops, META_INO, monkeypatch) == ["versions"]
    assert client.list_calls == 0  # .memfs and versions/ need no request
    tree.show_meta = True
    assert ".memfs" in await listdir(ops, ROOT, monkeypatch)


async def test_tree_follows_renames_and_keeps_deleted(env, monkeypatch):
    ops, tree, client, _ = env
    assert await listdir(ops, VERSIONS_INO, monkeypatch) == ["notes", "r.md", "x.md"]
    notes = await walk(ops, ".memfs", "versions", "notes")
    assert await listdir(ops, notes, monkeypatch) == ["b.md"]  # its current path only
    b_dir = await walk(ops, ".memfs", "versions", "notes", "b.md")
    names = await listdir(ops, b_dir, monkeypatch)
    assert [n.rsplit("-", 1)[-1] for n in names] == ["memver_a1", "memver_a2", "memver_a3"]
    ino = (await ops.lookup(b_dir, b(names[0]), ctx())).st_ino
    assert is_virtual(ino)
    a = await ops.getattr(ino, ctx())
    assert stat.S_ISREG(a.st_mode) and a.st_mode & 0o777 == 0o600 and a.st_size == 4
    assert await read(ops, ino) == b"one\n"
    # A deleted memory stays listed at its last path, with its delete.
    x_dir = await walk(ops, ".memfs", "versions", "x.md")
    xs = await listdir(ops, x_dir, monkeypatch)
    assert xs[-1].endswith("memver_x2-deleted") and len(xs) == 2
    deleted = (await ops.lookup(x_dir, b(xs[-1]), ctx())).st_ino
    assert await read(ops, deleted) == b""
    assert await read(ops, (await ops.lookup(x_dir, b(xs[0]), ctx())).st_ino) == b"gone soon\n"


async def test_redacted_version_is_empty_and_named_so(env, monkeypatch):
    ops, tree, client, _ = env
    r_dir = await walk(ops, ".memfs", "versions", "r.md")
    names = await listdir(ops, r_dir, monkeypatch)
    assert names[0].endswith("memver_r1-redacted")
    ino = (await ops.lookup(r_dir, b(names[0]), ctx())).st_ino
    assert (await ops.getattr(ino, ctx())).st_size == 0
    assert await read(ops, ino) == b""
    assert client.get_calls == 0


async def test_content_is_cached_by_sha_and_verified(env, monkeypatch):
    ops, tree, client, cache = env
    d = await walk(ops, ".memfs", "versions", "notes", "b.md")
    names = await listdir(ops, d, monkeypatch)
    first = (await ops.lookup(d, b(names[0]), ctx())).st_ino
    assert await read(ops, first) == b"one\n"
    assert client.get_calls == 1 and cache.get(sha256(b"one\n")) == b"one\n"
    assert await read(ops, first) == b"one\n"
    assert client.get_calls == 1  # from the blob cache
    client.corrupt = True
    second = (await ops.lookup(d, b(names[1]), ctx())).st_ino
    assert await fuse_errno(read(ops, second)) == errno.EIO


async def test_listing_is_cached_briefly_then_incremental(env, monkeypatch):
    ops, tree, client, _ = env
    await listdir(ops, VERSIONS_INO, monkeypatch)
    await listdir(ops, VERSIONS_INO, monkeypatch)
    assert client.list_calls == 1  # within LISTING_TTL
    client.versions["memver_n1"] = ver("memver_n1", "mem_n", "created", "/new.md", "n\n",
                                       "00:08.000000")
    monkeypatch.setattr(fs_versions, "LISTING_TTL", 0.0)
    assert "new.md" in await listdir(ops, VERSIONS_INO, monkeypatch)
    assert client.list_calls == 2


async def test_offline_with_no_listing_is_eio_and_stale_listing_is_served(env, monkeypatch):
    ops, tree, client, _ = env

    async def broken(*a, **kw):
        raise OSError("offline")
        yield  # pragma: no cover

    real = client.list_versions
    client.list_versions = broken
    assert await fuse_errno(ops.opendir(VERSIONS_INO, ctx())) == errno.EIO
    client.list_versions = real
    await listdir(ops, VERSIONS_INO, monkeypatch)
    client.list_versions = broken
    monkeypatch.setattr(fs_versions, "LISTING_TTL", 0.0)
    assert await listdir(ops, VERSIONS_INO, monkeypatch) == ["notes", "r.md", "x.md"]


async def test_every_change_under_meta_is_erofs(env, monkeypatch):
    ops, tree, client, _ = env
    d = await walk(ops, ".memfs", "versions", "notes", "b.md")
    names = await listdir(ops, d, monkeypatch)
    f = (await ops.lookup(d, b(names[0]), ctx())).st_ino
    mode = stat.S_IFREG | 0o644
    for coro in (
        ops.create(d, b"n", mode, os.O_WRONLY, ctx()),
        ops.mknod(d, b"n", mode, 0, ctx()),
        ops.mkdir(META_INO, b"n", stat.S_IFDIR | 0o755, ctx()),
        ops.unlink(d, b(names[0]), ctx()),
        ops.rmdir(VERSIONS_INO, b"notes", ctx()),
        ops.rmdir(ROOT, b".memfs", ctx()),
        ops.rename(d, b(names[0]), ROOT, b"stolen", 0, ctx()),
        ops.rename(ROOT, b".memfs", ROOT, b"m", 0, ctx()),
        ops.symlink(d, b"l", b"/x", ctx()),
        ops.link(f, ROOT, b"l", ctx()),
        ops.setattr(f, attrs(st_size=0), Fields(update_size=True), None, ctx()),
        ops.setattr(f, attrs(st_mode=0o777), Fields(update_mode=True), None, ctx()),
        ops.setxattr(f, b"user.x", b"1", ctx()),
        ops.removexattr(f, b"user.x", ctx()),
        ops.open(f, os.O_WRONLY, ctx()),
        ops.open(f, os.O_RDONLY | os.O_TRUNC, ctx()),
        ops.access(f, os.W_OK, ctx()),
    ):
        assert await fuse_errno(coro) == errno.EROFS
    assert await fuse_errno(ops.open(d, os.O_RDONLY, ctx())) == errno.EISDIR
    assert await fuse_errno(ops.getxattr(f, b"user.memfs.state", ctx())) == \
        fs_versions.pyfuse3.ENOATTR
    assert await ops.access(f, os.R_OK, ctx())


async def test_memfs_name_is_reserved_at_the_root(env):
    ops, tree, client, _ = env
    assert await fuse_errno(ops.mkdir(ROOT, b".memfs", stat.S_IFDIR | 0o755, ctx())) \
        == errno.EINVAL
    assert await fuse_errno(ops.create(ROOT, b".memfs", stat.S_IFREG | 0o644,
                                       os.O_WRONLY, ctx())) == errno.EINVAL
    # Deeper, the name is an ordinary one.
    sub = await ops.mkdir(ROOT, b"d", stat.S_IFDIR | 0o755, ctx())
    await ops.mkdir(sub.st_ino, b".memfs", stat.S_IFDIR | 0o755, ctx())


def test_remote_memories_under_memfs_are_hidden():
    assert decide.unknown_row("/.memfs/x.md", "s", None, None, False) is decide.Unknown.HIDDEN
    assert decide.unknown_row("/.memfsx", "s", None, None, False) is decide.Unknown.ADD
    assert decide.unknown_row("/d/.memfs/x", "s", None, None, False) is decide.Unknown.ADD
