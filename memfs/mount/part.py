"""What the parts of the FUSE layer share (memfs/mount/router.py routes each request to one).

A part answers pyfuse3's handlers on its own inode and handle numbers, as pyfuse3's
examples/tmpfs.py does for a whole filesystem: the tree (tree.py), the open files
(open_files.py), the `.memfs` versions tree (versions.py), the store marker (marker.py) and
a session root's directory (session_root.py). The two parts memfs makes up and never syncs,
the marker and the versions tree, are `ReadOnlyPart`s: whatever mode the mount has, every
change there is EROFS, and their modes stay the usual ones (so the owner's writes reach
memfs and get EROFS rather than the kernel's EACCES).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator

import pyfuse3

#: The longest name (bytes) of one path component, as statfs reports it (f_namemax) and as
#: every Linux filesystem enforces it: longer names are ENAMETOOLONG.
NAME_MAX = 255

#: (name, attributes, next id) of an open directory, as readdir replies them.
DirEntries = Iterator[tuple[bytes, pyfuse3.EntryAttributes, int]]


def err(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


def fs_name(raw: bytes) -> str:
    """A name from the kernel: ENAMETOOLONG first (as on any filesystem), then UTF-8 or
    EINVAL (a memory's path is text)."""
    if len(raw) > NAME_MAX:
        raise err(errno.ENAMETOOLONG)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise err(errno.EINVAL) from None


def changes_attributes(fields) -> bool:
    """Whether a setattr asks for a change (a bare `touch -c`-less stat asks for none)."""
    return bool(fields.update_size or fields.update_mode or fields.update_uid
                or fields.update_gid or fields.update_mtime or fields.update_atime)


def negative_entry(timeout: float) -> pyfuse3.EntryAttributes:
    """"No such name", which the kernel caches for `timeout` seconds."""
    e = pyfuse3.EntryAttributes()
    e.st_ino = 0
    e.entry_timeout = timeout
    return e


class ReadOnlyPart:
    """A part memfs makes up: it answers reads from `attr` and its own handlers, and
    refuses every change with EROFS. `attr` raises ENOENT for a number it does not know;
    the checks that call it first keep that order (an unknown inode is ENOENT, not
    EROFS, where the handler looks the inode up before it refuses)."""

    def attr(self, inode: int) -> pyfuse3.EntryAttributes:
        raise err(errno.ENOENT)

    # -- reads -------------------------------------------------------------------------

    async def getattr(self, inode, ctx):
        return self.attr(inode)

    async def setattr(self, inode, attr, fields, fh, ctx):
        e = self.attr(inode)
        if changes_attributes(fields):
            raise err(errno.EROFS)
        return e

    async def access(self, inode, mode, ctx):
        self.attr(inode)
        if mode & os.W_OK:
            raise err(errno.EROFS)
        return True

    async def getxattr(self, inode, name, ctx):
        self.attr(inode)
        raise err(pyfuse3.ENOATTR)

    async def listxattr(self, inode, ctx):
        self.attr(inode)
        return []

    async def readlink(self, inode, ctx):
        self.attr(inode)
        raise err(errno.EINVAL)

    async def flush(self, fh):
        return None

    async def fsync(self, fh, datasync):
        return None

    async def fsyncdir(self, fh, datasync):
        return None

    # -- every change ------------------------------------------------------------------

    async def _refuse(self, *args) -> None:
        raise err(errno.EROFS)

    setxattr = removexattr = mkdir = create = mknod = symlink = link = _refuse
    unlink = rmdir = rename = write = _refuse


class Absent(ReadOnlyPart):
    """The versions range of a store mounted without a versions tree: nothing is there
    (ENOENT), and a change there is still EROFS."""

    async def _missing(self, *args):
        raise err(errno.ENOENT)

    lookup = opendir = open = read = release = releasedir = _missing

    def dir_entries(self, fh: int, start_id: int) -> DirEntries:
        raise err(errno.ENOENT)
        yield  # a generator, as every part's dir_entries


ABSENT = Absent()
