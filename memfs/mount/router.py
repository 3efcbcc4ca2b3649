"""The FUSE layer's one dispatcher: each request goes, by its number, to the part that owns it.

The kernel knows one namespace of inode and handle numbers; memfs answers it with
parts that each own a range of it and answer pyfuse3's handlers on their own numbers
(memfs/mount/part.py). The router is the same for a plain mount and a session root:

    kernel number  = slot << 40 | local                         (slot: `SHIFT`)
    slot           = 0: a plain mount's store, or a session root's own directory
                     k >= 1: a session root's k-th store (`ROOT/<name>`)
    local inode    = [1, 2**32)      the tree (State's nodes)            tree.py
                     2**32           the store marker                    marker.py
                     [2**33, 2**39)  the `.memfs` versions tree          versions.py
    local handle   = [1, 2**38)      open files; directories (the tree)  open_files.py
                     [2**38, 2**39)  the marker's                        marker.py
                     [2**39, 2**40)  the versions tree's                 versions.py
    FAST_BIT | n   = an open the C shim answered, of kernel inode n      fastopen.py

A tree inode's `open` goes to the open files, whose handle it returns. Those ranges are
decoded here and nowhere else (`_inode`, `_handle`); a part's answer
is re-numbered on the way out (`_out`). Each handler is guarded (`_guarded`): a
request that fails unexpectedly costs that request an EIO, never the mount; its
latency goes to its store's metrics; and the mount's `IdleClock` notes it, so
background disk work waits for a quiet mount.
"""

from __future__ import annotations

import errno
import functools
import logging
import time

import pyfuse3

from memfs.core.metrics import FuseTiming
from memfs.core.signals import IdleClock
from memfs.mount.fastopen import FAST_BIT
from memfs.mount.marker import MARKER_FH, MARKER_INO
from memfs.mount.part import ABSENT, err
from memfs.mount.session_root import GROUP_ROOT, SessionRoot
from memfs.mount.store_fs import StoreFS
from memfs.mount.versions import FH_BASE, INO_MAX, INO_MIN
from memfs.state.state import ROOT_INO

log = logging.getLogger(__name__)

SHIFT = 40
LOCAL_MASK = (1 << SHIFT) - 1


class Slot:
    """One range of numbers: a store's (`fs`) or, for slot 0 of a session root, the
    root directory's (`fs` None)."""

    def __init__(self, index: int, name: str | None, fs: StoreFS | None) -> None:
        self.index = index
        self.name = name
        self.fs = fs
        self.base = index << SHIFT


class Router(pyfuse3.Operations):
    """The mount's `pyfuse3.Operations` (see the module docstring).

    A plain mount: `Router()` and one `add(fs)`. A session root: `Router(session_owner=
    (uid, gid))` and `add(fs, name)` per store, also while mounted (`--all`).
    """

    supports_dot_lookup = False
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, *, clock: IdleClock | None = None,
                 session_owner: tuple[int, int] | None = None, timeout: float = 300.0) -> None:
        super().__init__()
        self.clock = clock or IdleClock()
        self.slots: dict[int, Slot] = {}
        self.stores: dict[str, StoreFS] = {}  # a session root's, by name
        self.root: SessionRoot | None = None
        if session_owner is not None:
            self.root = SessionRoot(self.stores, owner=session_owner, timeout=timeout)
            self.slots[0] = Slot(0, None, None)

    def add(self, fs: StoreFS, name: str | None = None) -> Slot:
        """Mount a store: a plain mount's only one, or a session root's at `ROOT/<name>`."""
        if (self.root is None) != (name is None) or (self.root is None and self.slots):
            raise ValueError("a plain mount holds one store; a session root names each")
        slot = Slot(len(self.slots), name, fs)
        fs.ino_base = slot.base  # the fast-open set holds kernel numbers
        self.slots[slot.index] = slot
        if name is not None:
            self.stores[name] = fs
        return slot

    # -- numbers ---------------------------------------------------------------------

    def _slot(self, number: int) -> tuple[Slot, int]:
        slot = self.slots.get(number >> SHIFT)
        if slot is None:
            raise err(errno.ENOENT)
        return slot, number & LOCAL_MASK

    def _inode(self, inode: int):
        """(slot, the part that owns the inode, its local number)."""
        slot = self.slots.get(inode >> SHIFT)
        if slot is None:
            raise err(errno.ENOENT)
        local = inode & LOCAL_MASK
        fs = slot.fs
        if fs is None:
            return slot, self.root, local
        if INO_MIN <= local < INO_MAX:
            return slot, fs.versions or ABSENT, local
        if local == MARKER_INO and fs.marker is not None:
            return slot, fs.marker, local
        return slot, fs.tree, local

    def _handle(self, fh: int, *, directory: bool = False):
        """(slot, the part that owns the handle, its local number); a directory handle
        with `directory`. The shim's handles name the kernel inode instead."""
        if fh & FAST_BIT:
            slot, local = self._slot(fh & ~FAST_BIT)
            if slot.fs is None:
                raise err(errno.ENOENT)
            return slot, slot.fs.fast, local
        slot, local = self._slot(fh)
        fs = slot.fs
        if fs is None:
            return slot, self.root, local
        if local >= FH_BASE:
            return slot, fs.versions or ABSENT, local
        if directory:
            return slot, fs.tree, local
        if local >= MARKER_FH and fs.marker is not None:
            return slot, fs.marker, local
        return slot, fs.files, local

    @staticmethod
    def _out(slot: Slot, attr: pyfuse3.EntryAttributes) -> pyfuse3.EntryAttributes:
        if slot.base and attr.st_ino:  # 0: a negative entry
            attr.st_ino = slot.base | attr.st_ino
        return attr

    def _timing(self, first) -> FuseTiming | None:
        """The counters of the store a request is for (by its first number), if timed."""
        slot = self.slots.get((first & ~FAST_BIT) >> SHIFT if type(first) is int else 0)
        return None if slot is None or slot.fs is None else slot.fs.timing

    # -- lookups and attributes --------------------------------------------------------------

    async def lookup(self, parent_inode, name, ctx):
        slot, part, local = self._inode(parent_inode)
        if self.root is not None and local == ROOT_INO and slot.fs is not None \
                and name == b"..":
            return self.root.attr()  # a store's parent is the session root
        return self._out(slot, await part.lookup(local, name, ctx))

    async def getattr(self, inode, ctx):
        slot, part, local = self._inode(inode)
        return self._out(slot, await part.getattr(local, ctx))

    async def setattr(self, inode, attr, fields, fh, ctx):
        slot, part, local = self._inode(inode)
        return self._out(slot, await part.setattr(
            local, attr, fields, None if fh is None else fh & LOCAL_MASK, ctx))

    async def forget(self, inode_list):
        return None

    async def access(self, inode, mode, ctx):
        slot, part, local = self._inode(inode)
        return await part.access(local, mode, ctx)

    async def statfs(self, ctx):
        fs = self.slots[0].fs
        return await (self.root if fs is None else fs.tree).statfs(ctx)

    # -- directories -------------------------------------------------------------------

    async def opendir(self, inode, ctx):
        slot, part, local = self._inode(inode)
        return slot.base | await part.opendir(local, ctx)

    async def readdir(self, fh, start_id, token):
        slot, part, local = self._handle(fh, directory=True)
        for name, attr, next_id in part.dir_entries(local, start_id):
            if not pyfuse3.readdir_reply(token, name, self._out(slot, attr), next_id):
                break

    async def releasedir(self, fh):
        slot, part, local = self._handle(fh, directory=True)
        await part.releasedir(local)

    async def fsyncdir(self, fh, datasync):
        slot, part, local = self._handle(fh, directory=True)
        await part.fsyncdir(local, datasync)

    # -- xattrs -------------------------------------------------------------------------

    async def getxattr(self, inode, name, ctx):
        slot, part, local = self._inode(inode)
        return await part.getxattr(local, name, ctx)

    async def listxattr(self, inode, ctx):
        slot, part, local = self._inode(inode)
        return await part.listxattr(local, ctx)

    async def setxattr(self, inode, name, value, ctx):
        slot, part, local = self._inode(inode)
        return await part.setxattr(local, name, value, ctx)

    async def removexattr(self, inode, name, ctx):
        slot, part, local = self._inode(inode)
        return await part.removexattr(local, name, ctx)

    # -- namespace changes -------------------------------------------------------------

    async def mkdir(self, parent_inode, name, mode, ctx):
        slot, part, local = self._inode(parent_inode)
        return self._out(slot, await part.mkdir(local, name, mode, ctx))

    async def create(self, parent_inode, name, mode, flags, ctx):
        slot, part, local = self._inode(parent_inode)
        fi, attr = await part.create(local, name, mode, flags, ctx)
        fi.fh = slot.base | fi.fh
        return fi, self._out(slot, attr)

    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        slot, part, local = self._inode(parent_inode)
        return self._out(slot, await part.mknod(local, name, mode, rdev, ctx))

    async def symlink(self, parent_inode, name, target, ctx):
        slot, part, local = self._inode(parent_inode)
        return await part.symlink(local, name, target, ctx)

    async def link(self, inode, new_parent_inode, new_name, ctx):
        slot, part, local = self._inode(new_parent_inode)
        source = inode & LOCAL_MASK
        if slot.fs is not None and INO_MIN <= source < INO_MAX:
            part = slot.fs.versions or ABSENT  # a link out of the versions tree: EROFS
        return await part.link(source, local, new_name, ctx)

    async def readlink(self, inode, ctx):
        slot, part, local = self._inode(inode)
        return await part.readlink(local, ctx)

    async def unlink(self, parent_inode, name, ctx):
        slot, part, local = self._inode(parent_inode)
        await part.unlink(local, name, ctx)

    async def rmdir(self, parent_inode, name, ctx):
        slot, part, local = self._inode(parent_inode)
        await part.rmdir(local, name, ctx)

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        if self.root is not None and GROUP_ROOT in (parent_inode_old, parent_inode_new):
            raise err(errno.EROFS)  # the session root holds no files
        slot, part, old = self._inode(parent_inode_old)
        other, part_new, new = self._inode(parent_inode_new)
        if other is not slot:
            raise err(errno.EXDEV)  # another store: mv falls back to copy + delete
        if slot.fs is not None and part is slot.fs.tree:
            part = part_new  # into the versions tree: its refusal (EROFS)
        await part.rename(old, name_old, new, name_new, flags, ctx)

    # -- file I/O ---------------------------------------------------------------------

    async def open(self, inode, flags, ctx):
        slot, part, local = self._inode(inode)
        if slot.fs is not None and part is slot.fs.tree:
            part = slot.fs.files  # a file's handle is the open files' (the table above)
        fi = await part.open(local, flags, ctx)
        fi.fh = slot.base | fi.fh
        return fi

    async def read(self, fh, off, size):
        slot, part, local = self._handle(fh)
        return await part.read(local, off, size)

    async def write(self, fh, off, buf):
        slot, part, local = self._handle(fh)
        return await part.write(local, off, buf)

    async def flush(self, fh):
        slot, part, local = self._handle(fh)
        await part.flush(local)

    async def fsync(self, fh, datasync):
        slot, part, local = self._handle(fh)
        await part.fsync(local, datasync)

    async def release(self, fh):
        slot, part, local = self._handle(fh)
        await part.release(local)


def _guarded(handler):
    """pyfuse3 stops its main loop on any exception but FUSEError: one bad request must
    cost that request an EIO, never the whole mount. While its store exports metrics
    (`StoreFS.timing`), each request's latency and errno go there
    (memfs/core/metrics.py: a few hundred nanoseconds a request)."""
    op = handler.__name__

    @functools.wraps(handler)
    async def wrapper(self: Router, *args):
        self.clock.busy_at = start = time.monotonic()
        timing = self._timing(args[0] if args else None)
        try:
            return await handler(self, *args)
        except pyfuse3.FUSEError as exc:
            if timing is not None:
                timing.error(op, exc.errno)
            raise
        except Exception:
            log.exception("%s%r failed", op, args[:2])
            if timing is not None:
                timing.error(op, errno.EIO)
            raise err(errno.EIO) from None
        finally:
            if timing is not None:
                timing.record(op, time.monotonic() - start)

    return wrapper


HANDLERS = ("lookup", "getattr", "setattr", "opendir", "readdir", "releasedir", "fsyncdir",
            "statfs", "getxattr", "listxattr", "setxattr", "removexattr", "mkdir", "create",
            "mknod", "symlink", "link", "readlink", "unlink", "rmdir", "rename", "open",
            "read", "write", "flush", "fsync", "release", "access", "forget")

for _handler in HANDLERS:
    setattr(Router, _handler, _guarded(getattr(Router, _handler)))
del _handler
