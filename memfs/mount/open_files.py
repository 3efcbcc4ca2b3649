"""Open files: their buffers, and what makes their content durable (flush, fsync, release).

What each handler does and every errno it returns is in docs/SEMANTICS.md.

- A file's content stays the node's until the first write or truncate materializes it
  into a buffer that every handle on the inode shares (`OpenFile`). The sync side learns
  of unsaved writes from `State.open_dirty`; a clean buffer whose node changed under it
  is dropped on the next read (`loaded_sha`), so the sync code never reaches in here.
- The only network I/O is a cache miss's fetch (`_content`, through the engine's `fetch`).
- Durability (docs/SEMANTICS.md): after `flush` (close) returns, the content is
  committed as a row of `objects/staged.db` and the node row in `state.db`, so a
  daemon crash loses nothing (the blob file is written later, once the mount is
  quiet: memfs/state/blobs.py); after `fsync` returns, both places the content may be
  (staged.db's WAL and the blob file), their directory entries and the state WAL are
  also fsync'd (in a worker thread), so a power loss loses nothing either.
- Fast opens (fastopen.py): an inode is in the shim's set only while a read-only open
  of it would be answered as the shim answers it; this part adds and removes them.
  Reads and fsyncs on the shim's handles come here by inode (`FastHandles`).

Trio: state changes happen between awaits; `read` and `_materialize` await a
cache-miss fetch and `fsync` awaits its worker thread, so everything else is atomic
with respect to the sync tasks.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import pyfuse3
import trio

from memfs.core import paths
from memfs.core.metrics import StoreMetrics
from memfs.mount import fastopen
from memfs.mount.part import err
from memfs.state.blobs import BlobCache, fsync_paths, sha256
from memfs.state.state import EMPTY_SHA, Node, State

log = logging.getLogger(__name__)

#: How many removed files `node` still finds (an open racing an editor's save).
GONE_KEPT = 1024

#: Local-only temp files (vim swap and friends) may grow beyond a memory's limit.
LOCAL_ONLY_MAX_BYTES = 64 * 1024 * 1024

Fetch = Callable[[Node], Awaitable[bytes]]


@dataclass(eq=False)
class OpenFile:
    """Per-inode open state, shared by every handle on that inode."""

    node: Node
    nopen: int = 0
    data: bytearray | None = None  # materialized on the first write or truncate
    dirty: bool = False  # data differs from node.sha (mirrored in State.open_dirty)
    loaded_sha: str | None = None  # node.sha the clean buffer was read from


class OpenFiles:
    """One store's open files; their handles are [1, marker.MARKER_FH).

    Attributes:
        fetch: async callable returning a clean file's content from the server.
        ino_base: added to this store's inode numbers in the kernel (a session root's
            slot, router.py): the fast-open set holds kernel numbers.
    """

    def __init__(self, state: State, cache: BlobCache, *, fetch: Fetch | None = None,
                 metrics: StoreMetrics | None = None) -> None:
        self.state = state
        self.cache = cache
        self.fetch = fetch
        self.metrics = metrics or StoreMetrics()
        self.read_only = False
        self.ino_base = 0
        self._open: dict[int, OpenFile] = {}
        self._handles: dict[int, int] = {}  # fh -> ino
        self._appending: set[int] = set()  # fhs opened O_APPEND: they write at the end
        self._next_fh = 1
        self._last_open_sha: dict[int, str] = {}
        #: Files that left the tree lately, as they were (see `node`), newest last.
        self._gone: OrderedDict[int, Node] = OrderedDict()
        state.on_content = self.unfast
        state.on_added = self.fresh

    # -- what the kernel can still name ------------------------------------------------

    def node(self, ino: int) -> Node:
        """The node of an inode the kernel holds: in the tree, open though unlinked, or
        removed a moment ago (an editor's save renamed a file over it: the kernel may
        still send requests it looked up before, and on a local filesystem they would
        find the file as it was)."""
        node = self.state.nodes.get(ino)
        if node is None:
            of = self._open.get(ino)
            if of is not None:
                return of.node
            node = self._gone.get(ino)
            if node is None:
                raise err(errno.ENOENT)
        return node

    def size(self, node: Node) -> int:
        """What stat shows: an open buffer's length, else the node's."""
        of = self._open.get(node.ino)
        return len(of.data) if of and of.data is not None else node.size

    # -- the fast-open set ---------------------------------------------------------------

    def unfast(self, ino: int | None, gone: Node | None = None) -> None:
        """The file's content changed, it has a writer or it left the tree: its next
        read-only open must come to `open` again (fastopen.py). None: every file.
        A file that left (`gone`) is kept a while as it was (`node`): an open or a
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

    def fresh(self, ino: int) -> None:
        """A file the kernel has never seen holds no pages in it: its first open may keep
        the (empty) cache as well as any later one, so the shim may answer it. A cold
        `grep -r` then costs Python only its lookups and reads."""
        fastopen.add(self.ino_base | ino)

    def prime_fast_opens(self) -> None:
        """At the start of a mount every file is new to the kernel (see `fresh`), and
        no handle has unsaved writes yet."""
        for node in self.state.files():
            self.fresh(node.ino)

    # -- handlers ------------------------------------------------------------------------

    async def open(self, inode: int, flags: int, ctx=None) -> pyfuse3.FileInfo:
        """The router sends a tree inode's open here: the handle is this part's.
        keep_cache only when the content is what the last open saw, so a remote change
        drops stale pages."""
        node = self.node(inode)
        if node.is_dir:
            raise err(errno.EISDIR)
        writing = flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC
        if writing:
            self._writable()
            self.unfast(inode)
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
        return pyfuse3.FileInfo(fh=self._new_fh(inode, flags), keep_cache=keep)

    def open_created(self, node: Node, flags: int = 0) -> pyfuse3.FileInfo:
        """The handle `create` returns for the file it made."""
        of = self._open.setdefault(node.ino, OpenFile(node))
        of.nopen += 1
        self._last_open_sha[node.ino] = node.sha or ""
        return pyfuse3.FileInfo(fh=self._new_fh(node.ino, flags), keep_cache=False)

    async def read(self, fh, off, size):
        of = self._open[self._handles[fh]]
        if self._buffer(of) is not None:  # slice: no copy of a large temp file per read
            return bytes(of.data[off:off + size])
        data = await self._content(of.node)
        return data[off:off + size]

    async def write(self, fh, off, buf):
        of = self._open[self._handles[fh]]
        self._writable()
        if fh in self._appending:
            # The kernel's offset is the size it cached, older than another writer's
            # change: without the writeback cache, O_APPEND is the filesystem's to
            # honour (libfuse). At that offset an append overwrote the other writer's
            # text, or left NULs before it (found by a helper, 6 December).
            off = len(await self._materialize(of))
        end = off + len(buf)
        if end > self._limit(of.node):
            raise err(errno.EFBIG)
        data = await self._materialize(of)
        if off > len(data):
            data.extend(b"\0" * (off - len(data)))
        data[off:end] = buf
        if not of.dirty:
            self._set_dirty(of, True)
        return len(buf)

    async def flush(self, fh):
        ino = self._handles.get(fh)
        if ino is not None:
            self._persist(self._open[ino])

    async def fsync(self, fh, datasync):
        ino = self._handles.get(fh)
        if ino is not None:
            of = self._open[ino]
            self._persist(of)
            await self._sync_to_disk(of.node)

    async def release(self, fh):
        ino = self._handles.pop(fh, None)
        self._appending.discard(fh)
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

    # -- for setattr (tree.py) ---------------------------------------------------------

    async def truncate(self, node: Node, size: int) -> None:
        """Cut or extend a file to `size`, durable at once (as a close is)."""
        if node.is_dir:
            raise err(errno.EISDIR)
        if size > self._limit(node):
            raise err(errno.EFBIG)
        of = self._open.get(node.ino) or OpenFile(node)
        if size == 0 and of.data is None:
            of.data = bytearray()  # `: > f` needs no content (works offline)
            of.loaded_sha = node.sha
        data = await self._materialize(of)
        if size < len(data):
            del data[size:]
        else:
            data.extend(b"\0" * (size - len(data)))
        self._set_dirty(of, True)
        self._persist(of)
        if of.nopen == 0:
            of.data = None

    def persist_writes(self, ino: int) -> None:
        """cp -p / tar set times on the open fd before close: persist the buffered
        writes now, so close does not overwrite the mtime set then."""
        of = self._open.get(ino)
        if of is not None and of.dirty:
            self._persist(of)

    def save_open(self) -> tuple[list[dict], list[dict]]:
        """Unmount's durability point for files still open with unsaved writes (a
        process has not closed them): saved as they stand, as an fsync would save them,
        so the final flush pushes them; their writers' close fails later (the mount is
        gone), nothing lost. Without it the daemon exited with the bytes write()
        accepted in memory only, and the unmount said nothing was left. The files
        saved, and those a disk error kept from being saved: {"path", "reason"} each."""
        saved, unsaved = [], []
        for of in list(self._open.values()):
            if not of.dirty:
                continue
            node = of.node
            where = self.state.path_of(node) if node.ino in self.state.nodes else node.name
            try:
                self._persist(of)
            except pyfuse3.FUSEError as exc:
                unsaved.append({"path": where, "reason": "open with unsaved writes at "
                                f"unmount, which could not be saved ({os.strerror(exc.errno)})"})
                continue
            if node.ino in self.state.nodes:
                saved.append({"path": where, "reason": "open with unsaved writes at unmount: "
                              "saved as they stood (its writer's close will fail)"})
        return saved, unsaved

    # -- helpers ---------------------------------------------------------------------------

    def _writable(self) -> None:
        if self.read_only:
            raise err(errno.EROFS)

    def _limit(self, node: Node) -> int:
        if self.state.is_local_only(node):
            return LOCAL_ONLY_MAX_BYTES
        return paths.MAX_CONTENT_BYTES

    def _new_fh(self, ino: int, flags: int = 0) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self._handles[fh] = ino
        if flags & os.O_APPEND:
            self._appending.add(fh)
        return fh

    def _set_dirty(self, of: OpenFile, dirty: bool) -> None:
        if dirty:
            self.unfast(of.node.ino)
        of.dirty = dirty
        self.state.set_open_dirty(of.node.ino, dirty)

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
            raise err(errno.EIO)
        try:
            data = await self.fetch(node)
        except pyfuse3.FUSEError:
            raise
        except Exception as exc:  # offline, server error: the read fails, nothing is lost
            log.warning("cannot fetch %s: %s", node.memory_id, exc)
            raise err(errno.EIO) from None
        if sha256(data) != node.sha:  # never serve other bytes than the file's own
            log.warning("fetched content of %s is not %s", node.memory_id, node.sha)
            raise err(errno.EIO)
        return data

    async def _materialize(self, of: OpenFile) -> bytearray:
        if self._buffer(of) is None:
            sha = of.node.sha
            content = await self._content(of.node)
            if of.data is None:  # a concurrent write may have materialized it meanwhile
                of.data = bytearray(content)
                of.loaded_sha = sha
        return of.data

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
        except OSError as exc:
            log.error("cannot persist inode %d: %s", of.node.ino, exc)
            raise err(exc.errno or errno.EIO) from None
        except sqlite3.Error as exc:
            log.error("cannot persist inode %d: %s", of.node.ino, exc)
            full = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
            raise err(errno.ENOSPC if full else errno.EIO) from None

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
            raise err(exc.errno or errno.EIO) from None


class FastHandles:
    """The handles of opens the shim answered (fastopen.py): ``FAST_BIT | inode``, which
    the router decodes to this store's inode. Read-only, and shared by every such open
    of the inode: they act by inode, on what the open files hold."""

    def __init__(self, files: OpenFiles) -> None:
        self.files = files

    async def read(self, ino: int, off: int, size: int) -> bytes:
        """It comes only after the kernel dropped the cached pages, and reads what
        `OpenFiles.read` would."""
        fastopen.reads += 1
        files = self.files
        try:
            node = files.node(ino)  # in the tree, open, or removed lately (as it was)
        except pyfuse3.FUSEError:
            raise err(errno.ESTALE) from None
        return (await files._content(node))[off:off + size]

    async def fsync(self, ino: int, datasync) -> None:
        """`open(O_RDONLY)` + `fsync()` makes a file durable: the shim never answers it."""
        fastopen.fsyncs += 1
        files = self.files
        of = files._open.get(ino)
        if of is not None:  # another handle's unsaved writes: shared, as for any fh
            files._persist(of)
        node = files.state.nodes.get(ino)
        if node is not None:
            await files._sync_to_disk(node)

    async def write(self, ino, off, buf):  # read-only: the kernel sends no write
        raise err(errno.EROFS)

    async def flush(self, ino):  # the shim answers these itself: never here in a mount
        return None

    release = flush
