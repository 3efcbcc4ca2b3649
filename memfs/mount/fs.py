"""The FUSE request handlers: thin async methods over `State` and `BlobCache`.

What each handler does and every errno it returns is written out in
docs/SEMANTICS.md; tests hold this file to that document.

Rules that keep this fast and safe:

- lookup/getattr/readdir/open/flush of a clean file touch neither the disk nor
  the network: the tree is in memory (`State`), blobs are in the LRU.
- The only network I/O in a handler is the content fetch on a cache miss
  (`read`, `_materialize`), through the `fetch` callable the daemon injects, and
  a version read of the `.memfs/versions` tree not cached yet (fs_versions.py).
- Handlers never call `pyfuse3.invalidate_*`; they hand invalidations to
  `self.invalidate` (a queue drained outside request handling).
- Durability (docs/SEMANTICS.md): after `flush` (close) returns, the content is
  committed as a row of `objects/staged.db` and the node row in `state.db`, so a
  daemon crash loses nothing (the blob file is written later, once the mount is
  quiet: memfs/state/blobs.py); after `fsync` returns, both places the content may be
  (staged.db's WAL and the blob file), their directory entries and the state
  WAL are also fsync'd (in a worker thread), so a power loss loses nothing either.
- What the sync side must know about open files (unsaved writes) is kept in
  `State.open_dirty`; a clean buffer whose node changed under it is dropped
  on the next read (`loaded_sha`), so the sync code never reaches in here.

Trio: a handler's state changes happen between its awaits; `read` and
`_materialize` await a cache-miss fetch and `fsync` awaits its worker thread,
so everything else is atomic with respect to the sync tasks.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import sqlite3
import stat
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

from memfs.mount import fastopen  # first: it loads the C shim that pyfuse3 must bind to

# isort: split
import pyfuse3
import trio

from memfs.core import paths
from memfs.core.metrics import FuseTiming, StoreMetrics
from memfs.mount.fs_versions import FH_BASE, META_INO, META_NAME, VersionsTree, is_virtual
from memfs.state.blobs import BlobCache, fsync_paths, sha256
from memfs.state.state import EMPTY_SHA, ROOT_INO, Node, State, check_new_path

log = logging.getLogger(__name__)

#: How many removed files `_node` still finds (an open racing an editor's save).
GONE_KEPT = 1024

#: Local-only temp files (vim swap and friends) may grow beyond a memory's limit.
LOCAL_ONLY_MAX_BYTES = 64 * 1024 * 1024

#: The store marker's name and inode. Session mounts show it at each store's root,
#: as the SDK's folder sync writes it, so tools that check it trust the folder.
#: State numbers its nodes upwards from 1 and never reaches this inode.
#: The longest name (bytes) of one path component, as statfs reports it (f_namemax)
#: and as every Linux filesystem enforces it: longer names are ENAMETOOLONG.
NAME_MAX = 255

MARKER_NAME = ".anthropic-memory-store"
MARKER_INO = 2**32


def marker_content(store_id: str) -> bytes:
    """The SDK's marker format, byte for byte: no trailing newline."""
    return f"version 1\n{store_id}".encode()

Fetch = Callable[[Node], Awaitable[bytes]]
Invalidate = Callable[[tuple], None]


def _err(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


@dataclass(eq=False)
class OpenFile:
    """Per-inode open state, shared by every handle on that inode."""

    node: Node
    nopen: int = 0
    data: bytearray | None = None  # materialized on the first write or truncate
    dirty: bool = False  # data differs from node.sha (mirrored in State.open_dirty)
    loaded_sha: str | None = None  # node.sha the clean buffer was read from


class Operations(pyfuse3.Operations):
    """memfs request handlers.

    Attributes:
        state: the tree with local and base state (state.db).
        cache: the sha-keyed blob store.
        fetch: async callable returning a clean file's content from the server.
        kick: called after every durable change so the pusher wakes up.
        invalidate: queues ('inode', ino) / ('entry', parent_ino, name) for the
            kernel, processed outside any request handler.
    """

    supports_dot_lookup = False
    enable_writeback_cache = False
    enable_acl = False
    #: Each request's latency and errno, while the mount exports metrics (the engine sets it).
    fuse_timing: FuseTiming | None = None

    def __init__(self, state: State, cache: BlobCache, *, read_only: bool = False,
                 fetch: Fetch | None = None, kick: Callable[[], None] | None = None,
                 invalidate: Invalidate | None = None, timeout: float = 300.0,
                 marker: bytes | None = None,
                 owner: tuple[int, int] | None = None,
                 meta: VersionsTree | None = None) -> None:
        super().__init__()
        self.state = state
        #: content of the virtual marker file at the root, or None for no marker
        self.marker = marker
        #: (uid, gid) every entry is shown as owned by (`--uid`/`--gid`), or None
        self.owner = owner
        self._marker_fhs: set[int] = set()
        self.cache = cache
        self.read_only = read_only
        self.fetch = fetch
        self.kick = kick or (lambda: None)
        self.invalidate = invalidate or (lambda item: None)
        self.timeout = timeout
        self._open: dict[int, OpenFile] = {}
        self._handles: dict[int, int] = {}  # fh -> ino
        self._dirs: dict[int, list[tuple[str, int]]] = {}  # dir fh -> snapshot
        self._next_fh = 1
        self._last_open_sha: dict[int, str] = {}
        #: Files that left the tree lately, as they were (see `_node`), newest last.
        self._gone: OrderedDict[int, Node] = OrderedDict()
        #: Added to this store's inode numbers in the kernel (a session root's slot,
        #: fs_group.py): the fast-open set (fastopen.py) holds kernel numbers.
        self.ino_base = 0
        state.on_content = self._unfast
        state.on_added = self._fresh
        #: The read-only `.memfs` tree (memfs/mount/fs_versions.py): inodes in its reserved
        #: range and file handles from FH_BASE go there; every change there is EROFS.
        self.meta = meta
        self.metrics = StoreMetrics()  # the engine shares its sync context's

    # -- the virtual .memfs tree: small hooks ---------------------------------------

    def _meta(self) -> VersionsTree:
        if self.meta is None:
            raise _err(errno.ENOENT)
        return self.meta

    def _refuse_virtual(self, *inodes: int) -> None:
        """Any change inside `.memfs` (whatever the mount's mode): EROFS."""
        if any(is_virtual(i) for i in inodes):
            raise _err(errno.EROFS)

    def _is_meta_entry(self, parent_inode: int, name: bytes) -> bool:
        return self.meta is not None and parent_inode == ROOT_INO and name == META_NAME.encode()

    # -- helpers ---------------------------------------------------------------

    def _node(self, ino: int) -> Node:
        node = self.state.nodes.get(ino)
        if node is None:
            of = self._open.get(ino)  # unlinked but still open
            if of is not None:
                return of.node
            # Removed a moment ago (an editor's save renamed a file over it): the kernel
            # may still send requests for it that it looked up before, and on a local
            # filesystem they would find the file as it was.
            node = self._gone.get(ino)
            if node is None:
                raise _err(errno.ENOENT)
        return node

    def _dir(self, ino: int) -> Node:
        node = self._node(ino)
        if not node.is_dir:
            raise _err(errno.ENOTDIR)
        return node

    def _writable(self) -> None:
        if self.read_only:
            raise _err(errno.EROFS)

    @staticmethod
    def _name(raw: bytes) -> str:
        if len(raw) > NAME_MAX:
            raise _err(errno.ENAMETOOLONG)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _err(errno.EINVAL) from None

    def _limit(self, node: Node) -> int:
        if self.state.is_local_only_name(node):
            return LOCAL_ONLY_MAX_BYTES
        return paths.MAX_CONTENT_BYTES

    def _attr(self, node: Node) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = node.ino
        e.generation = 0
        e.entry_timeout = self.timeout
        e.attr_timeout = self.timeout
        e.st_mode = node.mode
        e.st_uid, e.st_gid = self.owner or (node.uid, node.gid)
        e.st_rdev = 0
        if node.is_dir:
            e.st_nlink = 2 + sum(1 for i in node.children.values() if self.state.nodes[i].is_dir)
            e.st_size = 4096
        else:
            e.st_nlink = 1 if node.ino in self.state.nodes else 0
            of = self._open.get(node.ino)
            e.st_size = len(of.data) if of and of.data is not None else node.size
        e.st_blksize = 4096
        e.st_blocks = (e.st_size + 511) // 512
        e.st_atime_ns = node.atime_ns
        e.st_mtime_ns = node.mtime_ns
        e.st_ctime_ns = node.ctime_ns
        return e

    def _marker_attr(self) -> pyfuse3.EntryAttributes:
        root = self.state.nodes[ROOT_INO]
        e = pyfuse3.EntryAttributes()
        e.st_ino = MARKER_INO
        e.entry_timeout = e.attr_timeout = self.timeout
        e.st_mode = stat.S_IFREG | 0o444
        e.st_uid, e.st_gid = self.owner or (root.uid, root.gid)
        e.st_nlink = 1
        e.st_size = len(self.marker or b"")
        e.st_blksize = 4096
        e.st_blocks = (e.st_size + 511) // 512
        e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = root.ctime_ns
        return e

    def _is_marker(self, parent: Node, name: str) -> bool:
        return self.marker is not None and parent.ino == ROOT_INO and name == MARKER_NAME

    def _check_new(self, parent: Node, name: str, *, is_dir: bool) -> None:
        try:
            check_new_path(self.state, parent, name, is_dir=is_dir)
        except paths.PathError as exc:
            raise _err(errno.ENAMETOOLONG if exc.kind == "too_long" else errno.EINVAL) from None

    def _check_capacity(self) -> None:
        """ENOSPC when one more memory would pass the store's 2,000 cap."""
        if self.state.at_capacity():
            raise _err(errno.ENOSPC)

    def _is_temp_name(self, name: str) -> bool:
        probe = Node(0, 0, name, False, 0)
        return self.state.is_local_only_name(probe)

    def _new_fh(self, ino: int) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self._handles[fh] = ino
        return fh

    def _set_dirty(self, of: OpenFile, dirty: bool) -> None:
        if dirty:
            self._unfast(of.node.ino)
        of.dirty = dirty
        self.state.set_open_dirty(of.node.ino, dirty)

    def _unfast(self, ino: int | None, gone: Node | None = None) -> None:
        """The file's content changed, it has a writer or it left the tree: its next
        read-only open must come to `open` again (memfs/mount/fastopen.py). None: every file.
        A file that left (`gone`) is kept a while as it was (`_node`): an open or a
        fast handle's read racing its removal still finds what it held."""
        if ino is None:
            fastopen.clear()
            return
        fastopen.discard(self.ino_base | ino)
        if gone is not None:
            self._gone[ino] = gone
            self._gone.move_to_end(ino)
            while len(self._gone) > GONE_KEPT:
                self._gone.popitem(last=False)

    def _fresh(self, ino: int) -> None:
        """A file the kernel has never seen holds no pages in it: its first open may keep
        the (empty) cache as well as any later one, so the shim may answer it. A cold
        `grep -r` then costs Python only its lookups and reads."""
        fastopen.add(self.ino_base | ino)

    def prime_fast_opens(self) -> None:
        """At the start of a mount every file is new to the kernel (see `_fresh`), and
        no handle has unsaved writes yet."""
        for node in self.state.files():
            self._fresh(node.ino)

    def _buffer(self, of: OpenFile) -> bytearray | None:
        """The open buffer, unless it is clean and the node's content moved on (a
        remote change or a restored conflict): then it is dropped and re-read."""
        if of.data is not None and not of.dirty and of.loaded_sha != of.node.sha:
            of.data = None
        return of.data

    async def _content(self, node: Node) -> bytes:
        """A file's current content: open buffer, blob cache, or the server."""
        of = self._open.get(node.ino)
        if of is not None and self._buffer(of) is not None:
            return bytes(of.data)
        assert node.sha is not None
        data = self.cache.get(node.sha)  # the empty blob needs no storage: b""
        if data is not None:
            self.metrics.cache_hits += 1
            return data
        self.metrics.cache_misses += 1
        if self.fetch is None:
            log.error("content of %s (%s) is missing from the cache",
                      self.state.path_of(node) if node.ino in self.state.nodes else node.name,
                      node.sha)
            raise _err(errno.EIO)
        try:
            data = await self.fetch(node)
        except pyfuse3.FUSEError:
            raise
        except Exception as exc:  # offline, server error: the read fails, nothing is lost
            log.warning("cannot fetch %s: %s", node.memory_id, exc)
            raise _err(errno.EIO) from None
        if sha256(data) != node.sha:  # never serve other bytes than the file's own
            log.warning("fetched content of %s is not %s", node.memory_id, node.sha)
            raise _err(errno.EIO)
        return data

    def _persist(self, of: OpenFile) -> None:
        """Close's durability point: content staged, row committed (a daemon crash
        loses nothing; memfs/state/blobs.py makes the content a file later).

        A local disk or database error becomes the syscall's errno (pyfuse3
        would otherwise let it end the main loop); the data stays buffered
        (`of.dirty`) and the next flush/fsync/close tries again."""
        try:
            if of.dirty:
                data = bytes(of.data or b"")
                sha = self.cache.stage(data)
                node = of.node
                if node.ino in self.state.nodes:
                    self.state.set_content(node, sha, len(data))
                else:  # unlinked while open: nothing to keep
                    self.state.orphan_content(node, sha, len(data))
                of.loaded_sha = sha
                self._set_dirty(of, False)
                self.kick()
        except OSError as exc:
            log.error("cannot persist inode %d: %s", of.node.ino, exc)
            raise _err(exc.errno or errno.EIO) from None
        except sqlite3.Error as exc:
            log.error("cannot persist inode %d: %s", of.node.ino, exc)
            full = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
            raise _err(errno.ENOSPC if full else errno.EIO) from None

    async def _sync_to_disk(self, node: Node) -> None:
        """fsync's durability point: the file's content (staged.db, or its blob file
        and directory entries), state.db and their WALs reach the disk (a power loss
        loses nothing). The fsyncs run in a worker thread: they touch only file
        descriptors, never State."""
        sha = node.sha
        files = self.state.durable_files()
        if sha and sha != EMPTY_SHA:
            files = [*self.cache.durable_files(sha), *files]
        try:
            await trio.to_thread.run_sync(partial(fsync_paths, files, missing_ok=True))
        except OSError as exc:
            log.error("cannot fsync inode %d: %s", node.ino, exc)
            raise _err(exc.errno or errno.EIO) from None

    async def _materialize(self, of: OpenFile) -> bytearray:
        if self._buffer(of) is None:
            sha = of.node.sha
            content = await self._content(of.node)
            if of.data is None:  # a concurrent write may have materialized it meanwhile
                of.data = bytearray(content)
                of.loaded_sha = sha
        return of.data

    # -- lookups -----------------------------------------------------------------

    async def lookup(self, parent_inode, name, ctx):
        if is_virtual(parent_inode):
            return await self._meta().lookup(parent_inode, self._name(name))
        if self._is_meta_entry(parent_inode, name):
            return self._meta().attr(META_INO)
        parent = self._dir(parent_inode)
        sname = self._name(name)
        if sname == ".":
            return self._attr(parent)
        if sname == "..":
            return self._attr(self._node(parent.parent or ROOT_INO))
        if self._is_marker(parent, sname):
            return self._marker_attr()
        node = self.state.child(parent, sname)
        if node is None:
            e = pyfuse3.EntryAttributes()  # negative entry, cached briefly
            e.st_ino = 0
            e.entry_timeout = 1.0
            return e
        return self._attr(node)

    async def getattr(self, inode, ctx):
        if inode == MARKER_INO and self.marker is not None:
            return self._marker_attr()
        if is_virtual(inode):
            return self._meta().attr(inode)
        return self._attr(self._node(inode))

    async def forget(self, inode_list):
        return None

    async def access(self, inode, mode, ctx):
        if inode == MARKER_INO and self.marker is not None:
            if mode & os.W_OK:
                raise _err(errno.EROFS)
            return True
        if is_virtual(inode):
            self._meta().attr(inode)
            if mode & os.W_OK:
                raise _err(errno.EROFS)
            return True
        self._node(inode)
        if mode & os.W_OK and self.read_only:
            raise _err(errno.EROFS)
        return True

    async def opendir(self, inode, ctx):
        if is_virtual(inode):
            return await self._meta().opendir(inode)
        node = self._dir(inode)
        fh = self._next_fh
        self._next_fh += 1
        entries = list(node.children.items())
        if inode == ROOT_INO and self.meta is not None and self.meta.show_meta:
            entries.append((META_NAME, META_INO))  # only with --show-meta
        entries.sort()
        if self.marker is not None and inode == ROOT_INO:
            entries = [(MARKER_NAME, MARKER_INO),
                       *(e for e in entries if e[0] != MARKER_NAME)]
        self._dirs[fh] = entries
        return fh

    def dir_entries(self, fh: int, start_id: int):
        """(name, attributes, next id) of an open directory from `start_id` on; the
        session root (fs_group) re-numbers the inodes before replying."""
        if fh >= FH_BASE:
            yield from self._meta().dir_entries(fh, start_id)
            return
        entries = self._dirs.get(fh, [])
        for i in range(start_id, len(entries)):
            name, ino = entries[i]
            if ino == MARKER_INO:
                yield name.encode("utf-8"), self._marker_attr(), i + 1
                continue
            if is_virtual(ino):
                yield name.encode("utf-8"), self._meta().attr(ino), i + 1
                continue
            node = self.state.nodes.get(ino)
            if node is None:
                continue  # removed since opendir
            yield name.encode("utf-8"), self._attr(node), i + 1

    async def readdir(self, fh, start_id, token):
        for name, attr, next_id in self.dir_entries(fh, start_id):
            if not pyfuse3.readdir_reply(token, name, attr, next_id):
                break

    async def releasedir(self, fh):
        if fh >= FH_BASE:
            return self._meta().release(fh)
        self._dirs.pop(fh, None)

    async def fsyncdir(self, fh, datasync):
        if fh >= FH_BASE:
            return
        await trio.to_thread.run_sync(
            partial(fsync_paths, self.state.durable_files(), missing_ok=True))

    async def statfs(self, ctx):
        s = pyfuse3.StatvfsData()
        cap = paths.MAX_MEMORIES_PER_STORE
        used_files = self.state.memory_count()
        used_bytes = sum(n.size for n in self.state.files())
        s.f_bsize = s.f_frsize = 4096
        s.f_blocks = cap * paths.MAX_CONTENT_BYTES // 4096
        s.f_bfree = s.f_bavail = max(0, s.f_blocks - (used_bytes + 4095) // 4096)
        s.f_files = cap
        s.f_ffree = s.f_favail = max(0, cap - used_files)
        s.f_namemax = NAME_MAX
        return s

    # -- xattrs: read-only sync state -----------------------------------------------

    _XATTRS = (b"user.memfs.state", b"user.memfs.memory_id", b"user.memfs.sha256",
               b"user.memfs.base_sha256", b"user.memfs.reason")

    def _xattr_values(self, node: Node) -> dict[bytes, str]:
        values: dict[bytes, str] = {b"user.memfs.state": self.state.sync_state(node)}
        if node.is_dir:
            return values
        if node.memory_id:
            values[b"user.memfs.memory_id"] = node.memory_id
        if node.sha:
            values[b"user.memfs.sha256"] = node.sha
        if node.base_sha:
            values[b"user.memfs.base_sha256"] = node.base_sha
        reason = self._reason(node)
        if reason:
            values[b"user.memfs.reason"] = reason
        return values

    def _reason(self, node: Node) -> str | None:
        if self.state.is_local_only_name(node):
            return "editor/tool temp file (local-only by name pattern)"
        if node.refused_sha is not None and node.refused_sha == node.sha:
            return node.refused_reason
        if node.error and self.state.is_dirty(node):
            return f"the server refused the last push: {node.error}; retried later"
        if self.read_only and self.state.is_dirty(node):
            if node.memory_id is None:
                return ("read-only mount: not on the server (deleted there, or never "
                        "pushed); kept here, unsynced")
            return "read-only mount: local changes are never pushed"
        return None

    async def getxattr(self, inode, name, ctx):
        if inode == MARKER_INO:
            raise _err(pyfuse3.ENOATTR)
        if is_virtual(inode):
            self._meta().attr(inode)
            raise _err(pyfuse3.ENOATTR)
        node = self._node(inode)
        if not name.startswith(b"user.memfs."):  # ls -l asks security.*/system.* per file
            raise _err(pyfuse3.ENOATTR)
        value = self._xattr_values(node).get(name)
        if value is None:
            raise _err(pyfuse3.ENOATTR)
        return value.encode("utf-8")

    async def listxattr(self, inode, ctx):
        if inode == MARKER_INO:
            return []
        if is_virtual(inode):
            self._meta().attr(inode)
            return []
        return list(self._xattr_values(self._node(inode)))

    async def setxattr(self, inode, name, value, ctx):
        if inode == MARKER_INO:
            raise _err(errno.EROFS)
        self._refuse_virtual(inode)
        self._node(inode)
        self._writable()
        if name.startswith(b"user.memfs."):
            raise _err(errno.EPERM)
        raise _err(errno.ENOTSUP)

    async def removexattr(self, inode, name, ctx):
        if inode == MARKER_INO:
            raise _err(errno.EROFS)
        self._refuse_virtual(inode)
        self._node(inode)
        self._writable()
        if name.startswith(b"user.memfs."):
            raise _err(errno.EPERM)
        raise _err(pyfuse3.ENOATTR)

    # -- namespace changes ---------------------------------------------------------

    async def mkdir(self, parent_inode, name, mode, ctx):
        self._refuse_virtual(parent_inode)
        self._writable()
        parent = self._dir(parent_inode)
        sname = self._name(name)
        if self.state.child(parent, sname) is not None or self._is_marker(parent, sname):
            raise _err(errno.EEXIST)
        self._check_new(parent, sname, is_dir=True)
        node = self.state.new_node(parent, sname, is_dir=True,
                                   mode=stat.S_IFDIR | (mode & ~ctx.umask & 0o7777),
                                   uid=ctx.uid, gid=ctx.gid)
        return self._attr(node)

    async def _create_file(self, parent_inode, name, mode, ctx) -> Node:
        self._refuse_virtual(parent_inode)
        self._writable()
        parent = self._dir(parent_inode)
        sname = self._name(name)
        if self.state.child(parent, sname) is not None or self._is_marker(parent, sname):
            raise _err(errno.EEXIST)
        self._check_new(parent, sname, is_dir=False)
        if not self._is_temp_name(sname):
            self._check_capacity()
        node = self.state.new_node(parent, sname, is_dir=False,
                                   mode=stat.S_IFREG | (mode & ~ctx.umask & 0o7777),
                                   uid=ctx.uid, gid=ctx.gid)
        self.kick()  # the empty file is pending too (its content needs no blob)
        return node

    async def create(self, parent_inode, name, mode, flags, ctx):
        node = await self._create_file(parent_inode, name, mode, ctx)
        of = self._open.setdefault(node.ino, OpenFile(node))
        of.nopen += 1
        fh = self._new_fh(node.ino)
        self._last_open_sha[node.ino] = node.sha or ""
        return pyfuse3.FileInfo(fh=fh, keep_cache=False), self._attr(node)

    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        self._refuse_virtual(parent_inode)
        self._writable()
        if not stat.S_ISREG(mode):
            raise _err(errno.EPERM)  # FIFOs, sockets, devices cannot be memories
        return self._attr(await self._create_file(parent_inode, name, mode, ctx))

    async def symlink(self, parent_inode, name, target, ctx):
        self._refuse_virtual(parent_inode)
        self._name(name)  # ENAMETOOLONG first, as on any filesystem
        self._writable()
        raise _err(errno.EPERM)

    async def link(self, inode, new_parent_inode, new_name, ctx):
        self._refuse_virtual(inode, new_parent_inode)
        self._name(new_name)
        self._writable()
        raise _err(errno.EPERM)

    async def readlink(self, inode, ctx):
        if is_virtual(inode):
            self._meta().attr(inode)
        raise _err(errno.EINVAL)

    async def unlink(self, parent_inode, name, ctx):
        self._refuse_virtual(parent_inode)
        if self._is_meta_entry(parent_inode, name):
            raise _err(errno.EROFS)
        self._writable()
        parent = self._dir(parent_inode)
        sname = self._name(name)
        if self._is_marker(parent, sname):
            raise _err(errno.EROFS)
        node = self.state.child(parent, sname)
        if node is None:
            raise _err(errno.ENOENT)
        if node.is_dir:
            raise _err(errno.EISDIR)
        self.state.remove(node)
        self.kick()

    async def rmdir(self, parent_inode, name, ctx):
        self._refuse_virtual(parent_inode)
        if self._is_meta_entry(parent_inode, name):
            raise _err(errno.EROFS)
        self._writable()
        parent = self._dir(parent_inode)
        node = self.state.child(parent, self._name(name))
        if node is None:
            raise _err(errno.ENOENT)
        if not node.is_dir:
            raise _err(errno.ENOTDIR)
        if node.children:
            raise _err(errno.ENOTEMPTY)
        self.state.remove(node)

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        self._refuse_virtual(parent_inode_old, parent_inode_new)
        if (self._is_meta_entry(parent_inode_old, name_old)
                or self._is_meta_entry(parent_inode_new, name_new)):
            raise _err(errno.EROFS)
        self._writable()
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise _err(errno.EINVAL)
        old_parent = self._dir(parent_inode_old)
        new_parent = self._dir(parent_inode_new)
        sold, snew = self._name(name_old), self._name(name_new)
        if self._is_marker(old_parent, sold) or self._is_marker(new_parent, snew):
            raise _err(errno.EROFS)
        node = self.state.child(old_parent, sold)
        if node is None:
            raise _err(errno.ENOENT)
        target = self.state.child(new_parent, snew)
        if target is node:
            return
        if target is not None:
            if flags & pyfuse3.RENAME_NOREPLACE:
                raise _err(errno.EEXIST)
            if target.is_dir and not node.is_dir:
                raise _err(errno.EISDIR)
            if node.is_dir and not target.is_dir:
                raise _err(errno.ENOTDIR)
            if target.is_dir and target.children:
                raise _err(errno.ENOTEMPTY)
        if node.is_dir:  # not into itself
            p = new_parent
            while True:
                if p.ino == node.ino:
                    raise _err(errno.EINVAL)
                if p.ino == ROOT_INO:
                    break
                p = self.state.nodes[p.parent]
        self._check_new(new_parent, snew, is_dir=node.is_dir)
        if node.is_dir:
            self._check_subtree(node, paths.join(self.state.path_of(new_parent), snew))
        elif (target is None and self._is_temp_name(sold) and not self._is_temp_name(snew)):
            self._check_capacity()
        self.state.rename(node, new_parent, snew, target)
        self.kick()

    def _check_subtree(self, node: Node, new_path: str) -> None:
        """Every file under a moved directory must still have a valid path."""
        old = self.state.path_of(node)
        for sub in self.state.walk(node):
            rel = self.state.path_of(sub)[len(old):]
            probe = new_path + rel + ("/x" if sub.is_dir else "")
            try:
                paths.validate_path(probe)
            except paths.PathError as exc:
                raise _err(errno.ENAMETOOLONG if exc.kind == "too_long"
                           else errno.EINVAL) from None

    # -- attributes ------------------------------------------------------------------

    async def setattr(self, inode, attr, fields, fh, ctx):
        changing = (fields.update_size or fields.update_mode or fields.update_uid
                    or fields.update_gid or fields.update_mtime or fields.update_atime)
        if inode == MARKER_INO and self.marker is not None:
            if changing:
                raise _err(errno.EROFS)
            return self._marker_attr()
        if is_virtual(inode):
            self._meta().attr(inode)
            if changing:
                raise _err(errno.EROFS)
            return self._meta().attr(inode)
        node = self._node(inode)
        if changing:
            self._writable()
        now = time.time_ns()
        if fields.update_size:
            if node.is_dir:
                raise _err(errno.EISDIR)
            if attr.st_size > self._limit(node):
                raise _err(errno.EFBIG)
            of = self._open.get(node.ino) or OpenFile(node)
            if attr.st_size == 0 and of.data is None:
                of.data = bytearray()  # `: > f` needs no content (works offline)
                of.loaded_sha = node.sha
            data = await self._materialize(of)
            if attr.st_size < len(data):
                del data[attr.st_size:]
            else:
                data.extend(b"\0" * (attr.st_size - len(data)))
            self._set_dirty(of, True)
            self._persist(of)  # truncate is durable at once
            if of.nopen == 0:
                of.data = None
        if fields.update_mtime:
            # cp -p / tar set times on the open fd before close: persist the
            # buffered writes now, so close does not overwrite the mtime set here.
            of = self._open.get(node.ino)
            if of is not None and of.dirty:
                self._persist(of)
        self.state.set_attrs(
            node,
            mode=stat.S_IFMT(node.mode) | (attr.st_mode & 0o7777) if fields.update_mode
            else None,
            uid=attr.st_uid if fields.update_uid else None,
            gid=attr.st_gid if fields.update_gid else None,
            atime_ns=attr.st_atime_ns if fields.update_atime else None,
            mtime_ns=attr.st_mtime_ns if fields.update_mtime else None,
            ctime_ns=now if changing else None)
        return self._attr(node)

    # -- file I/O ----------------------------------------------------------------------

    async def open(self, inode, flags, ctx):
        if is_virtual(inode):
            return self._meta().open(inode, flags)
        if inode == MARKER_INO and self.marker is not None:
            if flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC:
                raise _err(errno.EROFS)
            fh = self._next_fh
            self._next_fh += 1
            self._marker_fhs.add(fh)
            return pyfuse3.FileInfo(fh=fh, keep_cache=True)
        node = self._node(inode)
        if node.is_dir:
            raise _err(errno.EISDIR)
        writing = flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC
        if writing:
            self._writable()
            self._unfast(inode)
        of = self._open.get(inode)
        if of is None:
            of = self._open[inode] = OpenFile(node)
        of.nopen += 1
        if flags & os.O_TRUNC and writing and (node.size or of.data):
            of.data = bytearray()
            self._set_dirty(of, True)
        keep = self._last_open_sha.get(inode) == node.sha and not of.dirty
        self._last_open_sha[inode] = node.sha or ""
        if not writing and not of.dirty and inode in self.state.nodes:
            # The next read-only open would keep the cache: the shim may answer it.
            fastopen.add(self.ino_base | inode)
        return pyfuse3.FileInfo(fh=self._new_fh(inode), keep_cache=keep)

    async def _read_fast(self, ino: int, off: int, size: int) -> bytes:
        """A read on a handle the shim opened (``FAST_BIT | inode``): it comes only
        after the kernel dropped the cached pages, and reads what `read` would."""
        fastopen.reads += 1
        try:
            node = self._node(ino)  # in the tree, open, or removed lately (as it was)
        except pyfuse3.FUSEError:
            raise _err(errno.ESTALE) from None
        return (await self._content(node))[off:off + size]

    async def read(self, fh, off, size):
        if fh & fastopen.FAST_BIT:
            return await self._read_fast(fh & ~fastopen.FAST_BIT, off, size)
        if fh >= FH_BASE:
            return await self._meta().read(fh, off, size)
        if fh in self._marker_fhs:
            return (self.marker or b"")[off:off + size]
        of = self._open[self._handles[fh]]
        if self._buffer(of) is not None:  # slice: no copy of a large temp file per read
            return bytes(of.data[off:off + size])
        data = await self._content(of.node)
        return data[off:off + size]

    async def write(self, fh, off, buf):
        if fh >= FH_BASE:  # a fast handle (FAST_BIT) is read-only: the kernel sends no write
            raise _err(errno.EROFS)
        of = self._open[self._handles[fh]]
        if self.read_only:
            raise _err(errno.EROFS)
        end = off + len(buf)
        if end > self._limit(of.node):
            raise _err(errno.EFBIG)
        data = await self._materialize(of)
        if off > len(data):
            data.extend(b"\0" * (off - len(data)))
        data[off:end] = buf
        if not of.dirty:
            self._set_dirty(of, True)
        return len(buf)

    async def flush(self, fh):
        if fh >= FH_BASE:  # the .memfs tree, or a fast handle (the shim answers those)
            return
        ino = self._handles.get(fh)
        if ino is not None:
            self._persist(self._open[ino])

    async def fsync(self, fh, datasync):
        if fh & fastopen.FAST_BIT:  # read-only, opened by the shim: still power-safe
            fastopen.fsyncs += 1
            ino = fh & ~fastopen.FAST_BIT
            of = self._open.get(ino)
            if of is not None:  # another handle's unsaved writes: shared, as for any fh
                self._persist(of)
            node = self.state.nodes.get(ino)
            if node is not None:
                await self._sync_to_disk(node)
            return
        if fh >= FH_BASE:
            return
        ino = self._handles.get(fh)
        if ino is not None:
            of = self._open[ino]
            self._persist(of)
            await self._sync_to_disk(of.node)

    async def release(self, fh):
        if fh & fastopen.FAST_BIT:  # the shim answers these itself; never here in a mount
            return None
        if fh >= FH_BASE:
            return self._meta().release(fh)
        self._marker_fhs.discard(fh)
        ino = self._handles.pop(fh, None)
        if ino is None:
            return
        of = self._open[ino]
        try:
            self._persist(of)
        finally:
            of.nopen -= 1
        if of.nopen <= 0 and not of.dirty:  # unpersisted data stays for the next open
            del self._open[ino]
            if of.node.sha:
                self._last_open_sha[ino] = of.node.sha


_busy_at = 0.0  # time.monotonic() of the last request Python answered


def idle_for() -> float:
    """Seconds since the last FUSE request reached Python: background disk work
    (memfs/sync/fetcher.py) waits for a quiet mount."""
    return time.monotonic() - _busy_at


def _guarded(handler, timed: bool):
    """pyfuse3 stops its main loop on any exception but FUSEError: one bad
    request must cost that request an EIO, never the whole mount. `timed`: the
    class has `fuse_timing`; when set, each request's latency and errno go there
    (memfs/core/metrics.py: a few hundred nanoseconds a request)."""
    op = handler.__name__

    @functools.wraps(handler)
    async def wrapper(self, *args):
        global _busy_at
        _busy_at = start = time.monotonic()
        try:
            return await handler(self, *args)
        except pyfuse3.FUSEError as exc:
            if timed and self.fuse_timing is not None:
                self.fuse_timing.error(op, exc.errno)
            raise
        except Exception:
            log.exception("%s%r failed", op, args[:2])
            if timed and self.fuse_timing is not None:
                self.fuse_timing.error(op, errno.EIO)
            raise _err(errno.EIO) from None
        finally:
            if timed and (timing := self.fuse_timing) is not None:
                timing.record(op, time.monotonic() - start)

    return wrapper


HANDLERS = ("lookup", "getattr", "setattr", "opendir", "readdir", "releasedir", "fsyncdir",
            "statfs", "getxattr", "listxattr", "setxattr", "removexattr", "mkdir", "create",
            "mknod", "symlink", "link", "readlink", "unlink", "rmdir", "rename", "open",
            "read", "write", "flush", "fsync", "release", "access", "forget")


def guard_handlers(cls: type) -> None:
    """Wrap every request handler of cls in `_guarded` (timed if cls has `fuse_timing`:
    a session root's own class has not, its stores' handlers time each request)."""
    timed = hasattr(cls, "fuse_timing")
    for name in HANDLERS:
        setattr(cls, name, _guarded(getattr(cls, name), timed))


guard_handlers(Operations)
