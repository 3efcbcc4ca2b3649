"""Helpers for handler-level tests of the FUSE layer (memfs/mount/router.py and its parts;
no kernel, no mount).

Handlers are called directly, s3ql ``t3_fs_api`` style::

    env = FsEnv.make(tmp_path)
    fh, attr = await env.create(ROOT, "a.md", b"hello")   # create + write + flush
    assert await env.read_all(attr.st_ino) == b"hello"

`Fields` stands in for `pyfuse3.SetattrFields`, whose attributes cannot be
set from Python in pyfuse3 3.5.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pyfuse3
import pytest

from memfs.mount.router import Router
from memfs.mount.store_fs import StoreFS
from memfs.state.blobs import BlobCache
from memfs.state.state import ROOT_INO, Node, State

ROOT = ROOT_INO


def ctx() -> pyfuse3.RequestContext:
    return pyfuse3.RequestContext()  # uid 0, gid 0, umask 0


@dataclass
class Fields:
    """Stand-in for pyfuse3.SetattrFields (read-only attributes in pyfuse3 3.5)."""

    update_size: bool = False
    update_mode: bool = False
    update_uid: bool = False
    update_gid: bool = False
    update_atime: bool = False
    update_mtime: bool = False
    update_ctime: bool = False


def attrs(**kw) -> pyfuse3.EntryAttributes:
    a = pyfuse3.EntryAttributes()
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def b(name: str) -> bytes:
    return name.encode("utf-8")


def record_fsyncs(monkeypatch) -> list[str]:
    """Every fsync(2) from now on, by the path of the file or directory synced."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def mount_ops(state: State, cache: BlobCache, **kw) -> Router:
    """What a plain mount mounts: the router over one store's parts (StoreFS's options)."""
    ops = Router()
    ops.add(StoreFS(state, cache, **kw))
    return ops


async def fuse_errno(coro) -> int:
    """Await coro; return the errno of the FUSEError it raises (fail if none)."""
    with pytest.raises(pyfuse3.FUSEError) as info:
        await coro
    return info.value.errno


@dataclass
class FsEnv:
    tmp: Path
    state: State
    cache: BlobCache
    ops: Router

    @classmethod
    def make(cls, tmp: Path, *, read_only: bool = False, fetch=None) -> FsEnv:
        state = State(tmp / "state.db")
        cache = BlobCache(tmp / "objects")
        return cls(tmp, state, cache, mount_ops(state, cache, read_only=read_only, fetch=fetch))

    @property
    def fs(self) -> StoreFS:
        """The store's parts behind the router."""
        return self.ops.slots[0].fs

    def reopen_state(self) -> State:
        """A second State on the same db: what a restarted daemon would find.

        The first State is deliberately *not* closed (as after a crash)."""
        return State(self.tmp / "state.db")

    def node(self, path: str) -> Node:
        node = self.state.lookup_path(path)
        assert node is not None, path
        return node

    def ino(self, path: str) -> int:
        return self.node(path).ino

    async def create(self, parent: int, name: str | bytes, data: bytes | None = None, *,
                     mode: int = 0o644, keep_open: bool = False):
        """create(); write data; flush. Returns (fh, attr); released unless keep_open."""
        raw = name if isinstance(name, bytes) else b(name)
        fi, attr = await self.ops.create(parent, raw, stat.S_IFREG | mode,
                                         os.O_WRONLY | os.O_CREAT, ctx())
        if data:
            assert await self.ops.write(fi.fh, 0, data) == len(data)
        await self.ops.flush(fi.fh)
        if not keep_open:
            await self.ops.release(fi.fh)
        return fi.fh, attr

    async def mkdir(self, parent: int, name: str, mode: int = 0o755) -> int:
        attr = await self.ops.mkdir(parent, b(name), stat.S_IFDIR | mode, ctx())
        return attr.st_ino

    async def makedirs(self, names: list[str]) -> int:
        parent = ROOT
        for name in names:
            parent = await self.mkdir(parent, name)
        return parent

    async def open(self, ino: int, flags: int = os.O_RDONLY) -> pyfuse3.FileInfo:
        return await self.ops.open(ino, flags, ctx())

    async def read_all(self, ino: int) -> bytes:
        fi = await self.open(ino)
        try:
            return await self.ops.read(fi.fh, 0, 1 << 27)
        finally:
            await self.ops.release(fi.fh)

    async def write_file(self, ino: int, data: bytes, *, trunc: bool = True) -> None:
        fi = await self.open(ino, os.O_WRONLY | (os.O_TRUNC if trunc else 0))
        await self.ops.write(fi.fh, 0, data)
        await self.ops.flush(fi.fh)
        await self.ops.release(fi.fh)

    async def listdir(self, ino: int, monkeypatch) -> list[str]:
        got: list[str] = []

        def reply(token, name, attr, next_id):
            got.append(name.decode("utf-8"))
            return True

        monkeypatch.setattr(pyfuse3, "readdir_reply", reply)
        fh = await self.ops.opendir(ino, ctx())
        await self.ops.readdir(fh, 0, None)
        await self.ops.releasedir(fh)
        return got


__all__ = ["ROOT", "Fields", "FsEnv", "attrs", "b", "ctx", "errno", "fuse_errno", "mount_ops"]
