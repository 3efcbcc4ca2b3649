"""The store marker: `.anthropic-memory-store` at each store's root of a session mount.

The SDK's folder sync writes this file into a folder it syncs a store to; tools that
check it trust the folder. A session mount shows it the same way, byte for byte, as a
read-only file of its own inode (State numbers its nodes upwards from 1 and never
reaches `MARKER_INO`). The tree (tree.py) answers its name at the store root; the
router (router.py) sends its inode and its handles here.
"""

from __future__ import annotations

import errno
import os
import stat

import pyfuse3

from memfs.mount.part import ReadOnlyPart, err
from memfs.state.state import ROOT_INO, State

MARKER_NAME = ".anthropic-memory-store"
MARKER_INO = 2**32
#: The marker's file handles: [2**38, 2**39), above the open files' and below the
#: versions tree's (versions.FH_BASE).
MARKER_FH = 2**38


def marker_content(store_id: str) -> bytes:
    """The SDK's marker format, byte for byte: no trailing newline."""
    return f"version 1\n{store_id}".encode()


class Marker(ReadOnlyPart):
    """The marker file of one store (see the module docstring)."""

    def __init__(self, content: bytes, state: State, *, owner: tuple[int, int] | None,
                 timeout: float) -> None:
        self.content = content
        self.state = state
        self.owner = owner
        self.timeout = timeout
        self._next_fh = MARKER_FH

    def attr(self, inode: int = MARKER_INO) -> pyfuse3.EntryAttributes:
        """Owned and timed as the store's root (it was there when the store was)."""
        root = self.state.nodes[ROOT_INO]
        e = pyfuse3.EntryAttributes()
        e.st_ino = MARKER_INO
        e.entry_timeout = e.attr_timeout = self.timeout
        e.st_mode = stat.S_IFREG | 0o444
        e.st_uid, e.st_gid = self.owner or (root.uid, root.gid)
        e.st_nlink = 1
        e.st_size = len(self.content)
        e.st_blksize = 4096
        e.st_blocks = (e.st_size + 511) // 512
        e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = root.ctime_ns
        return e

    async def getxattr(self, inode, name, ctx):
        raise err(pyfuse3.ENOATTR)

    async def lookup(self, *args):  # a file: no entries (the kernel never asks)
        raise err(errno.ENOTDIR)

    opendir = lookup

    async def open(self, inode, flags, ctx):
        if flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC:
            raise err(errno.EROFS)
        fh = self._next_fh
        self._next_fh += 1
        return pyfuse3.FileInfo(fh=fh, keep_cache=True)

    async def read(self, fh, off, size):
        return self.content[off:off + size]

    async def release(self, fh):
        return None
