"""The tree: lookups, attributes, directories and namespace changes over `State`.

What each handler does and every errno it returns is in docs/SEMANTICS.md;
tests/test_fs_handlers.py holds this part to it.

- lookup, getattr, readdir and a clean file's open touch neither the disk nor the
  network: the tree is in memory (`State`). A change is one `State` call, written
  through to state.db (State then wakes the pusher itself: this part never calls
  into the sync code).
- The store root also shows two entries `State` does not hold: the marker (marker.py,
  a session mount's) and `.memfs` (versions.py, listed only with --show-meta). This
  part answers their names and refuses to change them; the router sends their inodes
  to their own parts.
- A file's content is the open files' business (open_files.py): the router sends
  `open` there; `setattr` truncates there.
- No handler calls `pyfuse3.invalidate_*` (the kernel's caches are invalidated outside
  request handling); none awaits but a truncate (a cache-miss fetch) and fsyncdir (its
  worker thread), so a handler's changes are atomic with respect to the sync tasks.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
import time
from functools import partial

import pyfuse3
import trio

from memfs.core import paths
from memfs.mount.marker import MARKER_INO, MARKER_NAME, Marker
from memfs.mount.open_files import OpenFiles
from memfs.mount.part import NAME_MAX, DirEntries, changes_attributes, err, fs_name, negative_entry
from memfs.mount.sync_xattrs import xattr_values
from memfs.mount.versions import META_INO, META_NAME, VersionsTree, is_virtual
from memfs.state.blobs import fsync_paths
from memfs.state.state import ROOT_INO, Node, State, check_new_path

#: The names tools give the temp file of an atomic save (`sed -i`: sedXXXXXX; rsync:
#: .NAME.XXXXXX; Python's tempfile: tmpXXXXXXXX, with a suffix too; NAME.tmp, and an
#: agent's NAME.tmp.PID.TIME: a helper). At the 2,000 cap they may
#: still be made: the rename that follows replaces a memory instead of adding one, and
#: with ENOSPC there `sed -i` and rsync could not edit a full store's memories (found
#: by a helper, 6 December). Renamed to a new name while the store is over its cap,
#: one is ENOSPC (it would be a memory past the cap); one that stays waits for room,
#: as any create the full store turns down (docs/SEMANTICS.md).
ATOMIC_SAVE_NAMES = ("sed??????", ".?*.??????", "tmp????????", "tmp????????.*", "*.tmp",
                     "*.tmp.[0-9]*")


def _atomic_save_name(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in ATOMIC_SAVE_NAMES)


class Tree:
    """One store's tree (see the module docstring).

    Attributes:
        owner: (uid, gid) every entry is shown as owned by (`--uid`/`--gid`), or None.
        timeout: how long the kernel may cache entries and attributes.
    """

    def __init__(self, state: State, files: OpenFiles, *, timeout: float = 300.0,
                 owner: tuple[int, int] | None = None, marker: Marker | None = None,
                 versions: VersionsTree | None = None) -> None:
        self.state = state
        self.files = files
        self.timeout = timeout
        self.owner = owner
        self.marker = marker
        self.versions = versions
        self.read_only = False
        self._dirs: dict[int, list[tuple[str, int]]] = {}  # dir fh -> snapshot
        self._next_fh = 1

    # -- helpers ---------------------------------------------------------------------

    def _dir(self, ino: int) -> Node:
        node = self.files.node(ino)
        if not node.is_dir:
            raise err(errno.ENOTDIR)
        return node

    def _writable(self) -> None:
        if self.read_only:
            raise err(errno.EROFS)

    def attributes(self, node: Node) -> pyfuse3.EntryAttributes:
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
            e.st_size = self.files.size(node)
        e.st_blksize = 4096
        e.st_blocks = (e.st_size + 511) // 512
        e.st_atime_ns = node.atime_ns
        e.st_mtime_ns = node.mtime_ns
        e.st_ctime_ns = node.ctime_ns
        return e

    def _is_marker(self, parent: Node, name: str) -> bool:
        return self.marker is not None and parent.ino == ROOT_INO and name == MARKER_NAME

    def _is_meta_entry(self, parent_inode: int, name: bytes) -> bool:
        return (self.versions is not None and parent_inode == ROOT_INO
                and name == META_NAME.encode())

    def _check_new(self, parent: Node, name: str, *, is_dir: bool) -> None:
        try:
            check_new_path(self.state, parent, name, is_dir=is_dir)
        except paths.PathError as exc:
            raise err(errno.ENAMETOOLONG if exc.kind == "too_long" else errno.EINVAL) from None

    def _check_capacity(self) -> None:
        """ENOSPC when one more memory would pass the store's 2,000 cap."""
        if self.state.at_capacity():
            raise err(errno.ENOSPC)

    def _existing_name(self, parent: Node, raw: bytes) -> str:
        """A name that may be in the tree already: another client's memory may hold a
        component over NAME_MAX (the API allows it, the kernel passes names up to 1,024
        bytes), and `ls` shows it; it is looked up, removed and moved away like any
        other, never made. Any other name over NAME_MAX is ENAMETOOLONG, as on any
        filesystem."""
        if len(raw) <= NAME_MAX:
            return fs_name(raw)
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise err(errno.ENAMETOOLONG) from None
        if self.state.child(parent, name) is None:
            raise err(errno.ENAMETOOLONG)
        return name

    def _is_temp_name(self, name: str) -> bool:
        probe = Node(0, 0, name, False, 0)
        return self.state.is_local_only_name(probe)

    def _check_subtree(self, node: Node, new_path: str) -> None:
        """Every file under a moved directory must still have a valid path."""
        old = self.state.path_of(node)
        for sub in self.state.walk(node):
            rel = self.state.path_of(sub)[len(old):]
            probe = new_path + rel + ("/x" if sub.is_dir else "")
            try:
                paths.validate_path(probe)
            except paths.PathError as exc:
                raise err(errno.ENAMETOOLONG if exc.kind == "too_long"
                          else errno.EINVAL) from None

    # -- lookups -----------------------------------------------------------------

    async def lookup(self, parent_inode, name, ctx):
        if self._is_meta_entry(parent_inode, name):
            return self.versions.attr(META_INO)
        parent = self._dir(parent_inode)
        sname = self._existing_name(parent, name)
        if sname == ".":
            return self.attributes(parent)
        if sname == "..":
            return self.attributes(self.files.node(parent.parent or ROOT_INO))
        if self._is_marker(parent, sname):
            return self.marker.attr()
        node = self.state.child(parent, sname)
        if node is None:
            return negative_entry(1.0)
        return self.attributes(node)

    async def getattr(self, inode, ctx):
        return self.attributes(self.files.node(inode))

    async def access(self, inode, mode, ctx):
        self.files.node(inode)
        if mode & os.W_OK and self.read_only:
            raise err(errno.EROFS)
        return True

    async def opendir(self, inode, ctx):
        node = self._dir(inode)
        fh = self._next_fh
        self._next_fh += 1
        entries = list(node.children.items())
        if inode == ROOT_INO and self.versions is not None and self.versions.show_meta:
            entries.append((META_NAME, META_INO))  # only with --show-meta
        entries.sort()
        if self.marker is not None and inode == ROOT_INO:
            entries = [(MARKER_NAME, MARKER_INO),
                       *(e for e in entries if e[0] != MARKER_NAME)]
        self._dirs[fh] = entries
        return fh

    def dir_entries(self, fh: int, start_id: int) -> DirEntries:
        entries = self._dirs.get(fh, [])
        for i in range(start_id, len(entries)):
            name, ino = entries[i]
            if ino == MARKER_INO:
                yield name.encode("utf-8"), self.marker.attr(), i + 1
                continue
            if is_virtual(ino):
                yield name.encode("utf-8"), self.versions.attr(ino), i + 1
                continue
            node = self.state.nodes.get(ino)
            if node is None:
                continue  # removed since opendir
            yield name.encode("utf-8"), self.attributes(node), i + 1

    async def releasedir(self, fh):
        self._dirs.pop(fh, None)

    async def fsyncdir(self, fh, datasync):
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

    # -- xattrs: read-only sync state (sync_xattrs.py) ------------------------------

    async def getxattr(self, inode, name, ctx):
        node = self.files.node(inode)
        if not name.startswith(b"user.memfs."):  # ls -l asks security.*/system.* per file
            raise err(pyfuse3.ENOATTR)
        value = xattr_values(self.state, node, read_only=self.read_only).get(name)
        if value is None:
            raise err(pyfuse3.ENOATTR)
        return value.encode("utf-8")

    async def listxattr(self, inode, ctx):
        return list(xattr_values(self.state, self.files.node(inode), read_only=self.read_only))

    async def setxattr(self, inode, name, value, ctx):
        """`user.memfs.*` are computed, never stored: a write of one is taken and has no
        effect, so the tools that copy attributes (`rsync -X`, `cp --preserve=xattr`,
        `tar --xattrs`) copy within the mount, and back in, as on any filesystem; they
        failed on EPERM. Any other name: not stored (ENOTSUP, which they pass over)."""
        self.files.node(inode)
        self._writable()
        if name.startswith(b"user.memfs."):
            return
        raise err(errno.ENOTSUP)

    async def removexattr(self, inode, name, ctx):
        """As `setxattr`: `rsync -X` removes from the copy what its source lacks."""
        self.files.node(inode)
        self._writable()
        if name.startswith(b"user.memfs."):
            return
        raise err(pyfuse3.ENOATTR)

    # -- namespace changes ---------------------------------------------------------

    async def mkdir(self, parent_inode, name, mode, ctx):
        self._writable()
        parent = self._dir(parent_inode)
        sname = fs_name(name)
        if self.state.child(parent, sname) is not None or self._is_marker(parent, sname):
            raise err(errno.EEXIST)
        self._check_new(parent, sname, is_dir=True)
        node = self.state.new_node(parent, sname, is_dir=True,
                                   mode=stat.S_IFDIR | (mode & ~ctx.umask & 0o7777),
                                   uid=ctx.uid, gid=ctx.gid)
        return self.attributes(node)

    async def _create_file(self, parent_inode, name, mode, ctx) -> Node:
        self._writable()
        parent = self._dir(parent_inode)
        sname = fs_name(name)
        if self.state.child(parent, sname) is not None or self._is_marker(parent, sname):
            raise err(errno.EEXIST)
        self._check_new(parent, sname, is_dir=False)
        if not self._is_temp_name(sname) and not _atomic_save_name(sname):
            self._check_capacity()
        node = self.state.new_node(parent, sname, is_dir=False,
                                   mode=stat.S_IFREG | (mode & ~ctx.umask & 0o7777),
                                   uid=ctx.uid, gid=ctx.gid)
        return node

    async def create(self, parent_inode, name, mode, flags, ctx):
        node = await self._create_file(parent_inode, name, mode, ctx)
        return self.files.open_created(node, flags), self.attributes(node)

    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        self._writable()
        if not stat.S_ISREG(mode):
            raise err(errno.EPERM)  # FIFOs, sockets, devices cannot be memories
        return self.attributes(await self._create_file(parent_inode, name, mode, ctx))

    async def symlink(self, parent_inode, name, target, ctx):
        fs_name(name)  # ENAMETOOLONG first, as on any filesystem
        self._writable()
        raise err(errno.EPERM)

    async def link(self, inode, new_parent_inode, new_name, ctx):
        fs_name(new_name)
        self._writable()
        raise err(errno.EPERM)

    async def readlink(self, inode, ctx):
        raise err(errno.EINVAL)

    async def unlink(self, parent_inode, name, ctx):
        if self._is_meta_entry(parent_inode, name):
            raise err(errno.EROFS)
        self._writable()
        parent = self._dir(parent_inode)
        sname = self._existing_name(parent, name)
        if self._is_marker(parent, sname):
            raise err(errno.EROFS)
        node = self.state.child(parent, sname)
        if node is None:
            raise err(errno.ENOENT)
        if node.is_dir:
            raise err(errno.EISDIR)
        self.state.remove(node)

    async def rmdir(self, parent_inode, name, ctx):
        if self._is_meta_entry(parent_inode, name):
            raise err(errno.EROFS)
        self._writable()
        parent = self._dir(parent_inode)
        node = self.state.child(parent, self._existing_name(parent, name))
        if node is None:
            raise err(errno.ENOENT)
        if not node.is_dir:
            raise err(errno.ENOTDIR)
        if node.children:
            raise err(errno.ENOTEMPTY)
        self.state.remove(node)

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        if (self._is_meta_entry(parent_inode_old, name_old)
                or self._is_meta_entry(parent_inode_new, name_new)):
            raise err(errno.EROFS)
        self._writable()
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise err(errno.EINVAL)
        old_parent = self._dir(parent_inode_old)
        new_parent = self._dir(parent_inode_new)
        sold, snew = self._existing_name(old_parent, name_old), fs_name(name_new)
        if self._is_marker(old_parent, sold) or self._is_marker(new_parent, snew):
            raise err(errno.EROFS)
        node = self.state.child(old_parent, sold)
        if node is None:
            raise err(errno.ENOENT)
        target = self.state.child(new_parent, snew)
        if target is node:
            return
        if target is not None:
            if flags & pyfuse3.RENAME_NOREPLACE:
                raise err(errno.EEXIST)
            if target.is_dir and not node.is_dir:
                raise err(errno.EISDIR)
            if node.is_dir and not target.is_dir:
                raise err(errno.ENOTDIR)
            if target.is_dir and target.children:
                raise err(errno.ENOTEMPTY)
        if node.is_dir:  # not into itself
            p = new_parent
            while True:
                if p.ino == node.ino:
                    raise err(errno.EINVAL)
                if p.ino == ROOT_INO:
                    break
                p = self.state.nodes[p.parent]
        self._check_new(new_parent, snew, is_dir=node.is_dir)
        if node.is_dir:
            self._check_subtree(node, paths.join(self.state.path_of(new_parent), snew))
        elif (target is None and self._is_temp_name(sold) and not self._is_temp_name(snew)):
            self._check_capacity()
        elif (target is None and node.memory_id is None and _atomic_save_name(sold)
              and self.state.over_capacity()):
            raise err(errno.ENOSPC)  # an atomic save's temp made at the cap: no new name
        self.state.rename(node, new_parent, snew, target)

    # -- attributes and opens ------------------------------------------------------------

    async def setattr(self, inode, attr, fields, fh, ctx):
        changing = changes_attributes(fields)
        node = self.files.node(inode)
        if changing:
            self._writable()
        now = time.time_ns()
        if fields.update_size:
            await self.files.truncate(node, attr.st_size)
        if fields.update_mtime:
            self.files.persist_writes(node.ino)
        self.state.set_attrs(
            node,
            mode=stat.S_IFMT(node.mode) | (attr.st_mode & 0o7777) if fields.update_mode
            else None,
            uid=attr.st_uid if fields.update_uid else None,
            gid=attr.st_gid if fields.update_gid else None,
            atime_ns=attr.st_atime_ns if fields.update_atime else None,
            mtime_ns=attr.st_mtime_ns if fields.update_mtime else None,
            ctime_ns=now if changing else None)
        return self.attributes(node)
