"""The read-only virtual tree `.memfs/versions/` of a mount: every memory's history.

    .memfs/                       (hidden from `ls -a` of the root unless --show-meta)
      versions/                   mirrors the store's directories
        notes/
          a.md/                   one directory per path a memory holds (or last held)
            2026-11-30T22-31-05.123Z-memver_01…            a version's content
            2026-11-30T22-40-17.002Z-memver_01…-deleted    the delete (empty)
            2026-11-30T22-29-59.871Z-memver_01…-redacted   a redacted version (empty)

docs/SEMANTICS.md ("The .memfs tree") is the contract. In short:

- The tree is built from the store's versions list (`memory_versions`, `view=basic`), so
  it follows renames (a memory's versions are all listed under its current path, or
  its last path once deleted) and deleted memories stay reachable until the server
  forgets their versions. It is never synced and never part of `State`.
- The versions list is the only network I/O of a directory handler, the analogue of
  the cache-miss fetch: `opendir` and `lookup` below `versions/` refresh it when it is
  older than `LISTING_TTL` seconds. A refresh is incremental (versions created since
  the newest one seen, minus a lookback: usually one request) except every
  `FULL_EVERY` seconds (a full listing: picks up redactions and expired versions). One
  refresh runs at a time (others wait for it), bounded by `REFRESH_TIMEOUT`; when it
  fails the tree answers from what it had (EIO only if it never had a listing).
- A version file's content is fetched when it is first read (`memory_versions`
  retrieve, `view=full`), checked against the version's sha and kept in the mount's
  sha-keyed blob cache (so a version equal to a current file costs nothing).
- Every change is EROFS. Modes are the usual 0644/0755 (owner: the daemon's user), as
  on a file system mounted `ro`, so the owner's writes reach memfs and get EROFS
  rather than the kernel's EACCES. Inode numbers live in [2**33, 2**39), which `State` never
  allocates; file handles in [2**39, 2**40) (the router, router.py, sends those here).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pyfuse3
import trio

from memfs.api.models import MemoryVersion, format_time, parse_time
from memfs.core.nodes import META_NAME
from memfs.mount.part import DirEntries, ReadOnlyPart, err, fs_name, negative_entry
from memfs.state.blobs import BlobCache, sha256
from memfs.state.view import StateView
from memfs.sync.feed import LOOKBACK

__all__ = ["FH_BASE", "INO_MAX", "INO_MIN", "META_INO", "META_NAME", "VERSIONS_INO",
           "VersionsTree", "is_virtual"]

log = logging.getLogger(__name__)

VERSIONS_NAME = "versions"

INO_MIN = 2**33
INO_MAX = 2**39
META_INO = INO_MIN
VERSIONS_INO = INO_MIN + 1
_FIRST_DYNAMIC_INO = INO_MIN + 1024
FH_BASE = 2**39  # below 2**40: the router (router.py) numbers store k's as k << 40 | local

#: A versions listing younger than this answers opendir/lookup without a request.
LISTING_TTL = 2.0
#: A full listing (not only what is new) at least this often while the tree is used: the
#: incremental one cannot see redactions (they add no version) or forgotten versions.
FULL_EVERY = 60.0
#: The longest a handler waits for a listing refresh or a version's content.
REFRESH_TIMEOUT = 15.0
#: Kernel cache of virtual entries and attributes (listings change).
TIMEOUT = 1.0


def is_virtual(ino: int) -> bool:
    return INO_MIN <= ino < INO_MAX


def version_name(v: MemoryVersion) -> str:
    """`<UTC time to the millisecond, ':' as '-'>Z-<version id>[-deleted][-redacted]`:
    a valid file name that sorts by time (ids break ties within a millisecond)."""
    when = parse_time(v.created_at).astimezone(UTC)
    name = when.strftime("%Y-%m-%dT%H-%M-%S") + f".{when.microsecond // 1000:03d}Z-{v.id}"
    if v.operation == "deleted":
        name += "-deleted"
    if v.redacted_at:
        name += "-redacted"
    return name


def _order(v: MemoryVersion) -> tuple[str, str]:
    return (format_time(parse_time(v.created_at)), v.id)


@dataclass
class _Dir:
    path: str  # '/' is versions/ itself
    ino: int


@dataclass
class _Open:
    vid: str
    data: bytes | None = None


class VersionsTree(ReadOnlyPart):
    """The `.memfs` virtual tree of one mount (see the module docstring)."""

    def __init__(self, client, store_id: str, cache: BlobCache, *, show_meta: bool = False,
                 uid: int | None = None, gid: int | None = None,
                 lookback: timedelta = LOOKBACK, live: StateView | None = None) -> None:
        """`live`: the mount's tree, whose owners and modes the versions take (see
        `_like`); `uid`/`gid`: the mount's --uid/--gid, every file's owner then."""
        self.client = client
        self.live = live
        self.owner_given = uid is not None
        # The incremental refresh re-reads versions this much older than the newest one
        # seen (a server may commit writes out of timestamp order): the mount's
        # --feed-lookback, as for its change feed.
        self.lookback = lookback
        self.store_id = store_id
        self.cache = cache
        self.show_meta = show_meta
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.started_ns = time.time_ns()
        # The index: every version listed, and what is derived from it.
        self.versions: dict[str, MemoryVersion] | None = None
        self.files: dict[str, dict[str, str]] = {}     # dir path -> {file name: version id}
        self.where: dict[str, str] = {}                # version id -> its dir path
        self.subdirs: dict[str, set[str]] = {}         # dir path -> names of subdirectories
        self.newest: datetime | None = None  # the newest version's time: the next since
        self.fresh_at = -1e18
        self.full_at = -1e18
        self._refreshing: trio.Event | None = None
        # Inodes: stable for the daemon's life.
        self._next_ino = _FIRST_DYNAMIC_INO
        self._dir_ino: dict[str, int] = {"/": VERSIONS_INO}
        self._dirs: dict[int, _Dir] = {VERSIONS_INO: _Dir("/", VERSIONS_INO)}
        self._file_ino: dict[str, int] = {}
        self._file_vid: dict[int, str] = {}
        self._fh: dict[int, _Open | list[tuple[str, int]]] = {}
        self._next_fh = FH_BASE

    # -- the index --------------------------------------------------------------------

    def _rebuild(self) -> None:
        assert self.versions is not None
        by_memory: dict[str, list[MemoryVersion]] = {}
        for v in self.versions.values():
            by_memory.setdefault(v.memory_id, []).append(v)
        files: dict[str, dict[str, str]] = {}
        where: dict[str, str] = {}
        subdirs: dict[str, set[str]] = {"/": set()}
        for vs in by_memory.values():
            vs.sort(key=_order)
            last = next((v.path for v in reversed(vs) if v.path), None)
            if last is None:
                continue  # every version redacted: no path to show it under
            names = files.setdefault(last, {})
            for v in vs:
                names[version_name(v)] = v.id
                where[v.id] = last
            child = last
            while child != "/":
                parent, _, name = child.rpartition("/")
                parent = parent or "/"
                subdirs.setdefault(parent, set()).add(name)
                subdirs.setdefault(child, set())
                child = parent
        self.files, self.subdirs, self.where = files, subdirs, where

    async def _fetch_listing(self, full: bool) -> None:
        assert full or self.versions is not None
        got: dict[str, MemoryVersion] = {}
        since = None
        if not full and self.newest is not None:
            since = format_time(self.newest - self.lookback)
        async for v in self.client.list_versions(self.store_id, created_gte=since, limit=100):
            got[v.id] = v
        if full:
            self.versions = got
        else:
            assert self.versions is not None
            self.versions.update(got)
        times = [parse_time(v.created_at) for v in got.values()]
        if times:
            self.newest = max(times) if full or self.newest is None else max(self.newest,
                                                                                 *times)
        self._rebuild()

    async def refresh(self, *, force: bool = False) -> None:
        """Make the index at most LISTING_TTL old (one refresh at a time; bounded).
        Raises EIO only when there has never been a listing."""
        now = time.monotonic()
        if not force and self.versions is not None and now - self.fresh_at < LISTING_TTL:
            return
        if self._refreshing is not None:
            with trio.move_on_after(REFRESH_TIMEOUT):
                await self._refreshing.wait()
            if self.versions is None:
                raise err(errno.EIO)
            return
        self._refreshing = done = trio.Event()
        full = self.versions is None or now - self.full_at >= FULL_EVERY
        try:
            with trio.move_on_after(REFRESH_TIMEOUT) as scope:
                await self._fetch_listing(full)
            if scope.cancelled_caught:
                log.warning(".memfs/versions: the versions listing took over %.0fs",
                            REFRESH_TIMEOUT)
            else:
                self.fresh_at = time.monotonic()
                if full:
                    self.full_at = self.fresh_at
        except Exception as exc:  # offline, server error: answer from what we had
            log.warning(".memfs/versions: cannot list versions: %s", exc)
        finally:
            self._refreshing = None
            done.set()
        if self.versions is None:
            raise err(errno.EIO)

    # -- inodes -------------------------------------------------------------------------

    def _alloc(self) -> int:
        ino = self._next_ino
        self._next_ino += 1
        return ino

    def _dir_node(self, path: str) -> _Dir:
        ino = self._dir_ino.get(path)
        if ino is None:
            ino = self._dir_ino[path] = self._alloc()
            self._dirs[ino] = _Dir(path, ino)
        return self._dirs[ino]

    def _version_ino(self, vid: str) -> int:
        ino = self._file_ino.get(vid)
        if ino is None:
            ino = self._file_ino[vid] = self._alloc()
            self._file_vid[ino] = vid
        return ino

    def known(self, ino: int) -> bool:
        return ino in (META_INO, VERSIONS_INO) or ino in self._dirs or ino in self._file_vid

    # -- attributes ---------------------------------------------------------------------

    def _base_attr(self, ino: int) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = ino
        e.generation = 0
        e.entry_timeout = TIMEOUT
        e.attr_timeout = TIMEOUT
        e.st_uid, e.st_gid = self.uid, self.gid
        e.st_rdev = 0
        e.st_blksize = 4096
        e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = self.started_ns
        return e

    def attr(self, ino: int) -> pyfuse3.EntryAttributes:
        e = self._base_attr(ino)
        vid = self._file_vid.get(ino)
        if vid is None:
            if ino not in (META_INO, VERSIONS_INO) and ino not in self._dirs:
                raise err(errno.ENOENT)
            d = self._dirs.get(ino)
            e.st_uid, e.st_gid, bits = self._like(d.path if d else "/", directory=True)
            e.st_mode = stat.S_IFDIR | bits
            e.st_nlink = 2
            e.st_size = 4096
        else:
            v = (self.versions or {}).get(vid)
            e.st_uid, e.st_gid, bits = self._like(self.where.get(vid), directory=False)
            e.st_mode = stat.S_IFREG | bits
            e.st_nlink = 1
            e.st_size = (v.content_size_bytes or 0) if v and not v.redacted_at else 0
            if v is not None:
                ns = int(parse_time(v.created_at).timestamp() * 1e9)
                e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = ns
        e.st_blocks = (e.st_size + 511) // 512
        return e

    def _like(self, path: str | None, *, directory: bool) -> tuple[int, int, int]:
        """(uid, gid, permission bits) of a directory or a version file here: those of
        the live file or directory at `path`, so that `--allow-other` shows a version to
        whom the file's modes show it (a version holds what the file held). A file's
        versions directory is searchable where the file is readable. No live entry (a
        deleted memory's): the mount's owner alone. (They were 0755/0644 for everyone,
        and then 0700/0600 for the daemon's user, which shut a file's creator out of
        its versions: a security review, then a review.)"""
        node = self.live.lookup_path(path) if self.live is not None and path else None
        if node is None or (node.is_dir and not directory):
            return self.uid, self.gid, 0o700 if directory else 0o600
        uid, gid = (self.uid, self.gid) if self.owner_given else (node.uid, node.gid)
        bits = node.mode & 0o777
        if directory and not node.is_dir:
            bits = (bits & 0o666) | (bits & 0o444) >> 2  # r: r-x
        return uid, gid, bits if directory else bits & 0o666

    # -- handlers (the router sends this tree's numbers here; changes: ReadOnlyPart) ---------

    async def lookup(self, parent: int, raw: bytes, ctx=None) -> pyfuse3.EntryAttributes:
        name = fs_name(raw)
        if parent == META_INO:
            if name == VERSIONS_NAME:
                return self.attr(VERSIONS_INO)
            return negative_entry(TIMEOUT)
        d = self._dirs.get(parent)
        if d is None:
            raise err(errno.ENOTDIR if parent in self._file_vid else errno.ENOENT)
        await self.refresh()
        if name in self.subdirs.get(d.path, ()):
            child = d.path + name if d.path == "/" else f"{d.path}/{name}"
            return self.attr(self._dir_node(child).ino)
        vid = self.files.get(d.path, {}).get(name)
        if vid is not None:
            return self.attr(self._version_ino(vid))
        return negative_entry(TIMEOUT)

    async def opendir(self, ino: int, ctx=None) -> int:
        if ino == META_INO:
            entries = [(VERSIONS_NAME, VERSIONS_INO)]
        else:
            d = self._dirs.get(ino)
            if d is None:
                raise err(errno.ENOTDIR if ino in self._file_vid else errno.ENOENT)
            await self.refresh()
            entries = []
            for name in self.subdirs.get(d.path, ()):
                child = d.path + name if d.path == "/" else f"{d.path}/{name}"
                entries.append((name, self._dir_node(child).ino))
            for name, vid in self.files.get(d.path, {}).items():
                entries.append((name, self._version_ino(vid)))
            entries.sort()
        fh = self._next_fh
        self._next_fh += 1
        self._fh[fh] = entries
        return fh

    def dir_entries(self, fh: int, start_id: int) -> DirEntries:
        """(name, attributes, next id) of an open directory from `start_id` on."""
        entries = self._fh.get(fh)
        if not isinstance(entries, list):
            return
        for i in range(start_id, len(entries)):
            name, ino = entries[i]
            yield name.encode("utf-8"), self.attr(ino), i + 1

    async def release(self, fh: int) -> None:
        self._fh.pop(fh, None)

    releasedir = release

    async def open(self, ino: int, flags: int, ctx=None) -> pyfuse3.FileInfo:
        if ino not in self._file_vid:
            if self.known(ino):
                raise err(errno.EISDIR)
            raise err(errno.ENOENT)
        if flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC:
            raise err(errno.EROFS)
        fh = self._next_fh
        self._next_fh += 1
        self._fh[fh] = _Open(self._file_vid[ino])
        return pyfuse3.FileInfo(fh=fh, keep_cache=False)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        of = self._fh.get(fh)
        if not isinstance(of, _Open):
            raise err(errno.EBADF)
        if of.data is None:
            of.data = await self.content(of.vid)
        return of.data[off:off + size]

    async def content(self, vid: str) -> bytes:
        """A version's bytes: the blob cache, else the server (checked against its sha).
        Deleted and redacted versions are empty."""
        v = (self.versions or {}).get(vid)
        if v is not None and (v.redacted_at or v.operation == "deleted"):
            return b""
        if v is not None and v.content_sha256:
            data = self.cache.get(v.content_sha256)
            if data is not None:
                return data
        try:
            with trio.fail_after(REFRESH_TIMEOUT):
                full = await self.client.get_version(self.store_id, vid, view="full")
        except Exception as exc:  # offline, server error, forgotten version
            log.warning(".memfs/versions: cannot fetch version %s: %s", vid, exc)
            raise err(errno.EIO) from None
        if self.versions is not None and v is not None and bool(v.redacted_at) != bool(
                full.redacted_at):  # redacted since the listing: its name changes
            self.versions[vid] = replace(full, content=None)
            self._rebuild()
        if full.redacted_at or full.operation == "deleted" or full.content is None:
            return b""
        data = full.content.encode("utf-8")
        if sha256(data) != full.content_sha256:
            log.warning(".memfs/versions: version %s does not hash to its sha", vid)
            raise err(errno.EIO)
        self.cache.put(data)
        return data

