"""One FUSE mount for several stores: the session root (`memfs mount --session|--all`).

A session container shows each attached store at ``/mnt/memory/<slug>``; this is
that view as one mount. The root is a read-only directory of slugs (EROFS on any
change, as the container's read-only parent). Below it, every request goes to the
store's own `fs.Operations`, unchanged: the group only re-numbers inodes and file
handles so several stores share one kernel namespace.

Numbering: store ``k`` (k >= 1) owns inodes and handles ``k << SHIFT | local``,
where ``local`` is the number its own Operations uses (its root is 1, the marker
2**32). Inode 1 is the group root. Nothing here awaits except the delegated
handler, so a store added by the `--all` poll appears between requests.
"""

from __future__ import annotations

import errno
import stat
import time

from memfs.mount.fastopen import FAST_BIT  # first: it loads the C shim that pyfuse3 must bind to

# isort: split
import pyfuse3

from memfs.mount.fs import NAME_MAX, Operations, guard_handlers
from memfs.state.state import ROOT_INO

SHIFT = 40
LOCAL_MASK = (1 << SHIFT) - 1
GROUP_ROOT = pyfuse3.ROOT_INODE


def _err(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


class Slot:
    """One store at ``ROOT/<name>``: its handlers and where its numbers start."""

    def __init__(self, index: int, name: str, ops: Operations) -> None:
        self.index = index
        self.name = name
        self.ops = ops
        self.base = index << SHIFT

    def glob(self, local: int) -> int:
        return self.base | local


class GroupOperations(pyfuse3.Operations):
    """The session root over each store's Operations (see the module docstring)."""

    supports_dot_lookup = False
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, *, owner: tuple[int, int], timeout: float = 300.0) -> None:
        super().__init__()
        self.owner = owner
        self.timeout = timeout
        self.slots: dict[int, Slot] = {}
        self.by_name: dict[str, Slot] = {}
        self._root_dirs: dict[int, list[str]] = {}  # group-root dir handle -> names
        self._next_root_fh = 1
        self._created_ns = time.time_ns()

    def add(self, name: str, ops: Operations) -> Slot:
        slot = Slot(len(self.slots) + 1, name, ops)
        self.slots[slot.index] = slot
        self.by_name[name] = slot
        return slot

    # -- numbering -------------------------------------------------------------------

    def _split(self, number: int) -> tuple[Slot, int]:
        slot = self.slots.get(number >> SHIFT)
        if slot is None:
            raise _err(errno.ENOENT)
        return slot, number & LOCAL_MASK

    def _out(self, slot: Slot, attr: pyfuse3.EntryAttributes) -> pyfuse3.EntryAttributes:
        if attr.st_ino:  # 0: a negative entry
            attr.st_ino = slot.glob(attr.st_ino)
        return attr

    def _root_attr(self) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = GROUP_ROOT
        e.entry_timeout = e.attr_timeout = self.timeout
        # Owner-writable so the owner's create reaches us and gets EROFS (not EACCES).
        e.st_mode = stat.S_IFDIR | 0o755
        e.st_nlink = 2 + len(self.slots)
        e.st_uid, e.st_gid = self.owner
        e.st_size = 4096
        e.st_blksize = 4096
        e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = self._created_ns
        return e

    # -- the root ----------------------------------------------------------------------

    async def lookup(self, parent_inode, name, ctx):
        if parent_inode == GROUP_ROOT:
            if len(name) > NAME_MAX:
                raise _err(errno.ENAMETOOLONG)
            slot = self.by_name.get(name.decode("utf-8", "replace"))
            if slot is None:
                e = pyfuse3.EntryAttributes()
                e.st_ino = 0
                e.entry_timeout = 1.0
                return e
            return self._out(slot, await slot.ops.getattr(ROOT_INO, ctx))
        slot, local = self._split(parent_inode)
        if local == ROOT_INO and name == b"..":
            return self._root_attr()
        return self._out(slot, await slot.ops.lookup(local, name, ctx))

    async def getattr(self, inode, ctx):
        if inode == GROUP_ROOT:
            return self._root_attr()
        slot, local = self._split(inode)
        return self._out(slot, await slot.ops.getattr(local, ctx))

    async def setattr(self, inode, attr, fields, fh, ctx):
        if inode == GROUP_ROOT:
            raise _err(errno.EROFS)
        slot, local = self._split(inode)
        return self._out(slot, await slot.ops.setattr(
            local, attr, fields, None if fh is None else fh & LOCAL_MASK, ctx))

    async def forget(self, inode_list):
        return None

    async def access(self, inode, mode, ctx):
        if inode == GROUP_ROOT:
            if mode & 0o2:  # W_OK
                raise _err(errno.EROFS)
            return True
        slot, local = self._split(inode)
        return await slot.ops.access(local, mode, ctx)

    async def opendir(self, inode, ctx):
        if inode == GROUP_ROOT:
            fh = self._next_root_fh
            self._next_root_fh += 1
            self._root_dirs[fh] = sorted(self.by_name)
            return fh
        slot, local = self._split(inode)
        return slot.glob(await slot.ops.opendir(local, ctx))

    async def readdir(self, fh, start_id, token):
        if fh in self._root_dirs:
            names = self._root_dirs[fh]
            for i in range(start_id, len(names)):
                slot = self.by_name.get(names[i])
                if slot is None:
                    continue
                attr = self._out(slot, await slot.ops.getattr(ROOT_INO, None))
                if not pyfuse3.readdir_reply(token, names[i].encode("utf-8"), attr, i + 1):
                    break
            return
        slot, local = self._split(fh)
        for name, attr, next_id in slot.ops.dir_entries(local, start_id):
            if not pyfuse3.readdir_reply(token, name, self._out(slot, attr), next_id):
                break

    async def releasedir(self, fh):
        if self._root_dirs.pop(fh, None) is not None:
            return
        slot, local = self._split(fh)
        await slot.ops.releasedir(local)

    async def fsyncdir(self, fh, datasync):
        if fh in self._root_dirs:
            return
        slot, local = self._split(fh)
        await slot.ops.fsyncdir(local, datasync)

    async def statfs(self, ctx):
        if not self.slots:
            s = pyfuse3.StatvfsData()
            s.f_bsize = s.f_frsize = 4096
            s.f_namemax = NAME_MAX
            return s
        total = None
        for slot in self.slots.values():  # the sum of the stores' capacities
            s = await slot.ops.statfs(ctx)
            if total is None:
                total = s
                continue
            for field in ("f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail"):
                setattr(total, field, getattr(total, field) + getattr(s, field))
        return total

    # -- xattrs ----------------------------------------------------------------------------

    async def getxattr(self, inode, name, ctx):
        if inode == GROUP_ROOT:
            raise _err(pyfuse3.ENOATTR)
        slot, local = self._split(inode)
        return await slot.ops.getxattr(local, name, ctx)

    async def listxattr(self, inode, ctx):
        if inode == GROUP_ROOT:
            return []
        slot, local = self._split(inode)
        return await slot.ops.listxattr(local, ctx)

    async def setxattr(self, inode, name, value, ctx):
        if inode == GROUP_ROOT:
            raise _err(errno.EROFS)
        slot, local = self._split(inode)
        return await slot.ops.setxattr(local, name, value, ctx)

    async def removexattr(self, inode, name, ctx):
        if inode == GROUP_ROOT:
            raise _err(errno.EROFS)
        slot, local = self._split(inode)
        return await slot.ops.removexattr(local, name, ctx)

    # -- namespace changes: EROFS at the root, EXDEV across stores -------------------------

    async def mkdir(self, parent_inode, name, mode, ctx):
        if parent_inode == GROUP_ROOT:
            raise _err(errno.EROFS)
        slot, local = self._split(parent_inode)
        return self._out(slot, await slot.ops.mkdir(local, name, mode, ctx))

    async def create(self, parent_inode, name, mode, flags, ctx):
        if parent_inode == GROUP_ROOT:
            raise _err(errno.EROFS)
        slot, local = self._split(parent_inode)
        fi, attr = await slot.ops.create(local, name, mode, flags, ctx)
        fi.fh = slot.glob(fi.fh)
        return fi, self._out(slot, attr)

    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        if parent_inode == GROUP_ROOT:
            raise _err(errno.EROFS)
        slot, local = self._split(parent_inode)
        return self._out(slot, await slot.ops.mknod(local, name, mode, rdev, ctx))

    async def symlink(self, parent_inode, name, target, ctx):
        if parent_inode == GROUP_ROOT:
            raise _err(errno.EROFS)
        slot, local = self._split(parent_inode)
        return await slot.ops.symlink(local, name, target, ctx)

    async def link(self, inode, new_parent_inode, new_name, ctx):
        if new_parent_inode == GROUP_ROOT:
            raise _err(errno.EROFS)
        slot, local = self._split(new_parent_inode)
        return await slot.ops.link(inode & LOCAL_MASK, local, new_name, ctx)

    async def readlink(self, inode, ctx):
        raise _err(errno.EINVAL)

    async def unlink(self, parent_inode, name, ctx):
        if parent_inode == GROUP_ROOT:
            raise _err(errno.EROFS)
        slot, local = self._split(parent_inode)
        await slot.ops.unlink(local, name, ctx)

    async def rmdir(self, parent_inode, name, ctx):
        if parent_inode == GROUP_ROOT:
            raise _err(errno.EROFS)
        slot, local = self._split(parent_inode)
        await slot.ops.rmdir(local, name, ctx)

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        if GROUP_ROOT in (parent_inode_old, parent_inode_new):
            raise _err(errno.EROFS)
        slot, old = self._split(parent_inode_old)
        other, new = self._split(parent_inode_new)
        if other is not slot:
            raise _err(errno.EXDEV)  # mv falls back to copy + delete
        await slot.ops.rename(old, name_old, new, name_new, flags, ctx)

    # -- file I/O ---------------------------------------------------------------------------

    async def open(self, inode, flags, ctx):
        if inode == GROUP_ROOT:
            raise _err(errno.EISDIR)
        slot, local = self._split(inode)
        fi = await slot.ops.open(local, flags, ctx)
        fi.fh = slot.glob(fi.fh)
        return fi

    async def read(self, fh, off, size):
        if fh & FAST_BIT:  # the shim's handle names the (global) inode: see fastopen.py
            slot, local = self._split(fh & ~FAST_BIT)
            return await slot.ops.read(FAST_BIT | local, off, size)
        slot, local = self._split(fh)
        return await slot.ops.read(local, off, size)

    async def write(self, fh, off, buf):
        slot, local = self._split(fh)
        return await slot.ops.write(local, off, buf)

    async def flush(self, fh):
        slot, local = self._split(fh)
        await slot.ops.flush(local)

    async def fsync(self, fh, datasync):
        if fh & FAST_BIT:  # as in read
            slot, local = self._split(fh & ~FAST_BIT)
            return await slot.ops.fsync(FAST_BIT | local, datasync)
        slot, local = self._split(fh)
        await slot.ops.fsync(local, datasync)

    async def release(self, fh):
        if fh & FAST_BIT:  # answered by the shim; never here in a mount
            return
        slot, local = self._split(fh)
        await slot.ops.release(local)


guard_handlers(GroupOperations)
