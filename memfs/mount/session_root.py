"""The root directory of a session mount (`memfs mount --session|--all ROOT`).

A session container shows each attached store at ``/mnt/memory/<name>``; a session
mount is that view as one mount. Its root is a read-only directory of the stores'
names (EROFS on any change, as the container's read-only parent); everything below a
name is that store's (the router, router.py, numbers each store's inodes and handles
in a range of its own). A store added by the `--all` poll appears between requests:
nothing here awaits but statfs, which sums the stores'.
"""

from __future__ import annotations

import errno
import stat
import time

import pyfuse3

from memfs.mount.part import NAME_MAX, DirEntries, err, negative_entry
from memfs.mount.store_fs import StoreFS
from memfs.state.state import ROOT_INO

#: The session root's inode; its own handles are small numbers too (the router's slot 0).
GROUP_ROOT = pyfuse3.ROOT_INODE


class SessionRoot:
    """The root directory over `stores` (the router's, by name: see the module docstring)."""

    def __init__(self, stores: dict[str, StoreFS], *, owner: tuple[int, int],
                 timeout: float = 300.0) -> None:
        self.stores = stores
        self.owner = owner
        self.timeout = timeout
        self._dirs: dict[int, list[str]] = {}  # dir handle -> names at opendir
        self._next_fh = 1
        self._created_ns = time.time_ns()

    def attr(self) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = GROUP_ROOT
        e.entry_timeout = e.attr_timeout = self.timeout
        # Owner-writable so the owner's create reaches us and gets EROFS (not EACCES).
        e.st_mode = stat.S_IFDIR | 0o755
        e.st_nlink = 2 + len(self.stores)
        e.st_uid, e.st_gid = self.owner
        e.st_size = 4096
        e.st_blksize = 4096
        e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = self._created_ns
        return e

    @staticmethod
    def _store_attr(fs: StoreFS) -> pyfuse3.EntryAttributes:
        """A store's root, numbered as the kernel knows it (these replies are the root's,
        whose numbers the router leaves as they are)."""
        e = fs.tree.attributes(fs.files.node(ROOT_INO))
        e.st_ino = fs.ino_base | e.st_ino
        return e

    @staticmethod
    def _root(inode: int) -> None:
        """Any other number of the root's range names nothing."""
        if inode != GROUP_ROOT:
            raise err(errno.ENOENT)

    # -- reads -----------------------------------------------------------------------

    async def lookup(self, parent_inode, name, ctx):
        self._root(parent_inode)
        if len(name) > NAME_MAX:
            raise err(errno.ENAMETOOLONG)
        fs = self.stores.get(name.decode("utf-8", "replace"))
        if fs is None:
            return negative_entry(1.0)
        return self._store_attr(fs)

    async def getattr(self, inode, ctx):
        self._root(inode)
        return self.attr()

    async def access(self, inode, mode, ctx):
        self._root(inode)
        if mode & 0o2:  # W_OK
            raise err(errno.EROFS)
        return True

    async def opendir(self, inode, ctx):
        self._root(inode)
        fh = self._next_fh
        self._next_fh += 1
        self._dirs[fh] = sorted(self.stores)
        return fh

    def dir_entries(self, fh: int, start_id: int) -> DirEntries:
        names = self._dirs.get(fh)
        if names is None:
            raise err(errno.ENOENT)
        for i in range(start_id, len(names)):
            fs = self.stores.get(names[i])
            if fs is None:
                continue
            yield names[i].encode("utf-8"), self._store_attr(fs), i + 1

    async def releasedir(self, fh):
        if self._dirs.pop(fh, None) is None:
            raise err(errno.ENOENT)

    async def fsyncdir(self, fh, datasync):
        if fh not in self._dirs:
            raise err(errno.ENOENT)

    async def statfs(self, ctx):
        """The sum of the stores' capacities."""
        if not self.stores:
            s = pyfuse3.StatvfsData()
            s.f_bsize = s.f_frsize = 4096
            s.f_namemax = NAME_MAX
            return s
        total = None
        for fs in list(self.stores.values()):
            s = await fs.tree.statfs(ctx)
            if total is None:
                total = s
                continue
            for field in ("f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail"):
                setattr(total, field, getattr(total, field) + getattr(s, field))
        return total

    async def getxattr(self, inode, name, ctx):
        self._root(inode)
        raise err(pyfuse3.ENOATTR)

    async def listxattr(self, inode, ctx):
        self._root(inode)
        return []

    async def readlink(self, inode, ctx):
        raise err(errno.EINVAL)

    async def open(self, inode, flags, ctx):
        self._root(inode)
        raise err(errno.EISDIR)

    # -- changes: EROFS at the root ----------------------------------------------------

    async def _refuse(self, inode, *args):
        self._root(inode)
        raise err(errno.EROFS)

    setattr = setxattr = removexattr = mkdir = create = mknod = symlink = _refuse
    unlink = rmdir = rename = _refuse

    async def link(self, inode, new_parent_inode, new_name, ctx):
        self._root(new_parent_inode)
        raise err(errno.EROFS)

    # -- no files here ---------------------------------------------------------------

    async def _no_file(self, fh, *args):
        raise err(errno.ENOENT)

    read = write = flush = fsync = release = _no_file
