"""The mount's state: the tree, the local (desired) state and the base (server) state.

One `State` per mount. The whole tree lives in memory (a store holds at most
2,000 memories, so this is small) and every durable change is written through
to ``state.db`` (memfs/state/schema.py) in the same call, inside one SQLite
transaction. Request handlers therefore never touch the disk for lookups,
getattr or readdir, and a killed daemon finds everything it had acknowledged.

The model (docs/ARCHITECTURE.md): per file we keep what the server is known to
hold (the *base*: ``memory_id``, ``base_path``, ``base_sha``) and what the
mount holds now (its place in the tree and ``sha``). The pusher makes the
server match local; the reconciler moves the base when the server changes. A
deleted file whose memory is still on the server is a *tombstone* until its
delete goes out.

Ownership: this class is the only writer of identity, base, tombstones and
conflict rows. This module holds the local side (what the filesystem
handlers do); memfs/state/transitions.py holds every transition the sync side makes;
memfs/state/view.py (`StateView`, this class's base) every read, which offline
readers make on a read-only state.db.

Trio: every method is synchronous and commits one transaction with no
checkpoint inside, so each is atomic with respect to every other task (and to
a crash): that is all the locking the single-threaded daemon needs. A run of
methods called with no checkpoint between them can share one commit
(:meth:`State.batch`: a first listing's thousands of new files).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from memfs.core import paths
from memfs.core.mountconfig import DEFAULT_LOCAL_ONLY_PATTERNS
from memfs.core.nodes import (
    EMPTY_SHA,
    META_NAME,
    PARK_DIR,
    PARK_NAME,
    ROOT_INO,
    Node,
    Tombstone,
    is_parked,
)
from memfs.core.signals import Wakeup
from memfs.state.schema import NODE_COLUMNS, TOMBSTONE_COLUMNS, create_or_migrate
from memfs.state.transitions import SyncTransitions
from memfs.state.view import LOCAL_ONLY_KEY, SetView, StateView

__all__ = ["DEFAULT_LOCAL_ONLY_PATTERNS", "EMPTY_SHA", "PARK_DIR", "PARK_NAME", "ROOT_INO",
           "Node", "State", "StateView", "Tombstone", "check_new_path", "is_parked"]

log = logging.getLogger(__name__)


class State(StateView, SyncTransitions):
    """The in-memory tree backed by state.db (WAL, synchronous=NORMAL): the reads of
    `StateView` and every write."""

    def __init__(self, db_path: Path, *, local_only_patterns: Sequence[str] | None = None):
        """local_only_patterns: the mount's (recorded in state.db for offline readers);
        None: those recorded, else the defaults."""
        #: Inodes whose open buffer holds writes not yet closed (set by the open files,
        #: memfs/mount/open_files.py). A remote change never replaces such a file's
        #: content; it waits for the close.
        self._open_dirty: set[int] = set()
        #: ino -> ino that took its place by rename-over (memory only): a create in
        #: flight for the replaced node settles on its successor.
        self._replaced: dict[int, int] = {}
        #: Counter of base changes from server answers (see Node.base_epoch).
        self.epoch = 0
        # Called with (parent_ino, name) of every directory prune() removes and of the
        # topmost one ensure_dir() creates, so the daemon can drop the kernel's cached
        # entry, positive or negative (set by the SyncContext).
        self.on_entry: Callable[[int, str], None] = lambda parent, name: None
        # Called with an inode whose content is about to change, or which left the tree
        # (then with its node, as it was), and with None when the whole tree was
        # reloaded: the handlers' fast-open set (memfs/mount/fastopen.py) must never outlive
        # what it promised about a file, and an open racing the removal finds the node.
        self.on_content: Callable[..., None] = lambda ino, gone=None: None
        #: Set by every local change that leaves something to push (`_touch`,
        #: `_tombstone`): the pusher waits on it, the mount need not know it exists.
        self.local_change = Wakeup()
        # Called with the inode of a file that came from the server: new to the kernel too.
        self.on_added: Callable[[int], None] = lambda ino: None
        self._batch = False  # inside batch(): transactions join its own
        super().__init__(db_path, local_only_patterns=local_only_patterns)
        #: pattern -> the files it kept here: the last mount's patterns this one dropped
        #: while files they kept are still here (`_keep_dropped`).
        self._kept: dict[str, list[str]] = {}
        if local_only_patterns is not None:
            self._kept = self._keep_dropped(self.recorded_patterns() or ())
            if self.recorded_patterns() != self.local_only_patterns:
                self.set_meta(LOCAL_ONLY_KEY, json.dumps(list(self.local_only_patterns)))

    @property
    def kept_patterns(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """(pattern, the files it keeps here) of each pattern `_keep_dropped` kept."""
        return tuple((p, tuple(paths)) for p, paths in self._kept.items())

    def _keep_dropped(self, recorded: Sequence[str]) -> dict[str, list[str]]:
        """A pattern the last mount had and this one lacks stays in effect while a file
        it kept here is still here: a mount without the user's `--local-only '*.secret'`
        pushed every such file, silently (a helper). Removing or renaming the files
        lets the pattern go."""
        kept: dict[str, list[str]] = {}
        for pattern in recorded:
            if pattern in self.local_only_patterns:
                continue
            held = [self.path_of(n) for n in self.files()
                    if n.memory_id is None and fnmatch.fnmatchcase(n.name, pattern)]
            if held:
                kept[pattern] = held
        if kept:
            self._use_patterns((*self.local_only_patterns, *kept))
        return kept

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.db_path), isolation_level=None, check_same_thread=False)
        try:
            os.chmod(self.db_path, 0o600)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            create_or_migrate(db)
        except BaseException:
            db.close()
            raise
        return db

    def _unreadable(self, exc: sqlite3.Error) -> sqlite3.Error:
        return exc  # as SQLite raised it: the daemon's callers tell full disks apart

    @property
    def open_dirty(self) -> SetView[int]:
        return SetView(self._open_dirty)

    # -- loading and persistence ------------------------------------------

    def _root_made(self, root: Node) -> None:
        with self.transaction():
            self._save(root)

    def _reload(self) -> None:
        """Bring the in-memory tree back to what state.db holds.

        Mutations change memory first and commit second; when a commit fails
        (disk full, I/O error) this undoes the memory side, so the tree never
        shows what was not made durable."""
        old = self._nodes
        self._nodes, self._by_memory, self._tombstones, self._conflicted = {}, {}, {}, {}
        self.on_content(None)
        self._load(reuse=old)

    class _Txn:
        def __init__(self, state: State) -> None:
            self.state = state

        def __enter__(self):
            if self.state._batch:  # part of the batch's transaction; it commits or undoes
                return
            self.state.db.execute("BEGIN")

        def __exit__(self, exc_type, *_):
            if self.state._batch:  # still inside the batch (it resets before its own exit)
                return False
            db = self.state.db
            if exc_type is None:
                try:
                    db.execute("COMMIT")
                    return False
                except sqlite3.Error:
                    self._undo()
                    raise
            self._undo()
            return False

        def _undo(self) -> None:
            if self.state.db.in_transaction:
                self.state.db.execute("ROLLBACK")
            self.state._reload()

    def transaction(self) -> State._Txn:
        return State._Txn(self)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction for the mutations made inside (each method's own joins it):
        one commit instead of one each. The caller makes no checkpoint inside (no other
        task may write meanwhile) and lets any error out: the whole batch is then
        undone, memory and state.db alike."""
        if self._batch:
            yield
            return
        with self.transaction():
            self._batch = True
            try:
                yield
            finally:
                self._batch = False

    def _save(self, node: Node) -> None:
        if not node.is_dir:
            self._maybe_dirty.add(node.ino)
            # Whatever makes a file count against the cap (its name, its memory
            # id) is a column of its row: it changes only with a save.
            if self._counts(node):
                self._counted.add(node.ino)
            else:
                self._counted.discard(node.ino)
        values = [getattr(node, c) for c in NODE_COLUMNS]
        values[NODE_COLUMNS.index("is_dir")] = int(node.is_dir)
        self.db.execute(
            f"INSERT OR REPLACE INTO nodes ({', '.join(NODE_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(NODE_COLUMNS))})",
            values,
        )

    def _save_tombstone(self, tomb: Tombstone) -> None:
        values = [getattr(tomb, c) for c in TOMBSTONE_COLUMNS]
        self.db.execute(
            f"INSERT OR REPLACE INTO tombstones ({', '.join(TOMBSTONE_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(TOMBSTONE_COLUMNS))})",
            values,
        )

    def _save_nodes(self, *nodes: Node) -> None:
        """Write nodes through to state.db in one transaction (local attributes)."""
        with self.transaction():
            for node in nodes:
                self._save(node)

    def durable_files(self) -> list[Path]:
        """What must reach the disk for every committed transaction to survive a
        power loss: the WAL (commits land there first), the database file and
        their directory entries. `fs.fsync` syncs these in a worker thread."""
        return [self.db_path.with_name(self.db_path.name + "-wal"), self.db_path,
                self.db_path.parent]

    def set_meta(self, key: str, value: str | None) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # -- local mutations (called by the filesystem) -------------------------------

    def _touch(self, node: Node) -> None:
        """A local change to a file's content, place or identity (the pusher wakes)."""
        self.local_change.set()
        node.gen += 1
        node.changed_at = time.time()
        if node.dirty_since is None:
            node.dirty_since = node.changed_at
        node.fail_count, node.retry_at, node.error = 0, None, None

    def set_open_dirty(self, ino: int, dirty: bool) -> None:
        if dirty:
            self._open_dirty.add(ino)
        else:
            self._open_dirty.discard(ino)

    def new_node(self, parent: Node, name: str, *, is_dir: bool, mode: int, uid: int,
                 gid: int) -> Node:
        """Add a file or directory; a file at a tombstoned path revives that memory."""
        now = time.time_ns()
        node = Node(self._next_ino, parent.ino, name, is_dir, mode, uid, gid, now, now, now)
        self._next_ino += 1
        if not is_dir:
            node.sha = EMPTY_SHA
            self._touch(node)
        self._nodes[node.ino] = node
        parent.children[name] = node.ino
        parent.mtime_ns = parent.ctime_ns = now
        with self.transaction():
            if not is_dir:
                self._revive(node)
            self._save(node)
            self._save(parent)
        return node

    def _revive(self, node: Node) -> None:
        """Give a new file the memory of a pending delete at the same path (not one
        whose DELETE went out: the memory may be gone already, the answer lost)."""
        if self.is_local_only_name(node):
            return
        path = self.path_of(node)
        for tomb in list(self._tombstones.values()):
            if tomb.base_path == path and tomb.delete_sent_at is None:
                self._give(node, tomb)
                return

    def _give(self, node: Node, tomb: Tombstone) -> None:
        """The pending delete is cancelled: node is that memory's file again."""
        node.memory_id, node.base_path, node.base_sha = (
            tomb.memory_id, tomb.base_path, tomb.base_sha)
        node.sent_sha = tomb.sent_sha
        self._by_memory[tomb.memory_id] = node.ino
        self._drop_tombstone(tomb.memory_id)

    def _take_back(self, node: Node) -> None:
        """A file of one memory moved to where another's pending delete is, holding
        exactly what that memory holds there (or will, once our request in flight for it
        lands), is that memory back: a round trip (`mv a c` over c, then `mv c a`; or
        `cp a c; rm a; mv c a`). It takes it back, and its own memory is deleted
        instead. Keeping its own would delete a's memory and move c's onto a's path
        with a's bytes: a's history cut, and a change another writer made to a
        meanwhile met as a conflict with content the server already had. (Called for a
        file that keeps a memory of its own, so never for a temp name.)"""
        path = self.path_of(node)
        # Only a pending delete at this path, or one a request of ours moves here, can
        # hold it (a directory's rename asks this for every file below it).
        moved_here = {t.memory_id for t in self._doubts.values() if t.written[0] == path}
        tomb = next((t for t in self._tombstones.values()
                     if (t.base_path == path or t.memory_id in moved_here)
                     and t.delete_sent_at is None and self._would_hold(t, path, node.sha)),
                    None)
        if tomb is not None:
            self._tombstone(node)
            self._give(node, tomb)

    def _would_hold(self, tomb: Tombstone, path: str, sha: str | None) -> bool:
        """Whether tomb's memory holds sha at path on the server, as far as we know: its
        base, or what one of our requests for it wrote (its answer not heard yet; a
        content-only update's is the sent sha: one request at a time per file)."""
        held = {(tomb.base_path, s) for s in (tomb.base_sha, tomb.sent_sha) if s}
        held |= {t.written for t in self._doubts.values() if t.memory_id == tomb.memory_id}
        return (path, sha) in held

    def set_content(self, node: Node, sha: str, size: int) -> None:
        """A durable content change (close, fsync or truncate)."""
        now = time.time_ns()
        self.on_content(node.ino)
        node.sha, node.size = sha, size
        node.mtime_ns = node.ctime_ns = now
        self._touch(node)
        self._save_nodes(node)

    def orphan_content(self, node: Node, sha: str, size: int) -> None:
        """The new content of a file unlinked while open: the handles still open read
        it; it has no row left in state.db to write, and no memory to push."""
        assert node.ino not in self._nodes
        node.sha, node.size = sha, size

    def set_attrs(self, node: Node, *, mode: int | None = None, uid: int | None = None,
                  gid: int | None = None, atime_ns: int | None = None,
                  mtime_ns: int | None = None, ctime_ns: int | None = None) -> None:
        """chmod, chown and utimes (the fields given); written through to state.db
        while the file is in the tree (an unlinked one keeps them for its handles)."""
        given = {k: v for k, v in (("mode", mode), ("uid", uid), ("gid", gid),
                                   ("atime_ns", atime_ns), ("mtime_ns", mtime_ns),
                                   ("ctime_ns", ctime_ns)) if v is not None}
        for key, value in given.items():
            setattr(node, key, value)
        if given and node.ino in self._nodes:
            self._save_nodes(node)

    def remove(self, node: Node) -> None:
        """Unlink a file or remove an empty directory; a memory becomes a tombstone."""
        parent = self._nodes[node.parent]
        now = time.time_ns()
        parent.mtime_ns = parent.ctime_ns = now
        with self.transaction():
            self._drop(node)
            self._tombstone(node)
            self._save(parent)

    def _drop(self, node: Node) -> None:
        """Take node out of the tree, memory and state.db (inside a transaction). Every
        way a file leaves goes through here, so the content hook always hears of it
        (the kernel's fast opens, the handlers' `_gone`); only `prune`'s empty
        directories, which no open or fast handle can hold, leave on their own."""
        del self._nodes[node.parent].children[node.name]
        del self._nodes[node.ino]
        self.on_content(node.ino, node)
        self.db.execute("DELETE FROM nodes WHERE ino=?", (node.ino,))

    def _tombstone(self, node: Node) -> None:
        """Detach node's memory; its server delete waits out the delete delay."""
        if node.memory_id is None:
            return
        self.local_change.set()
        self._by_memory.pop(node.memory_id, None)
        tomb = Tombstone(node.memory_id, node.base_path or "", node.base_sha or "", time.time(),
                         sent_sha=node.sent_sha)
        self._tombstones[tomb.memory_id] = tomb
        self._save_tombstone(tomb)
        node.memory_id = node.base_path = node.base_sha = node.sent_sha = None

    def _drop_tombstone(self, memory_id: str) -> None:
        tomb = self._tombstones.pop(memory_id, None)
        if tomb is not None and tomb.base_sha:
            # Revived, restored with another writer's change, or deleted: its versions
            # still hold what it held, which a file renamed over with content never read
            # may need (fetcher.recover).
            self._note_source(tomb.base_sha, memory_id)
        self.db.execute("DELETE FROM tombstones WHERE memory_id=?", (memory_id,))

    def rename(self, node: Node, new_parent: Node, new_name: str, target: Node | None) -> None:
        """Move node; over an existing file the target keeps its memory id and history."""
        old_parent = self._nodes[node.parent]
        now = time.time_ns()
        with self.transaction():
            if target is not None:
                # The editors' atomic save: `node` takes the target's place and
                # identity; node's own memory (if any) is deleted after the delay.
                self._drop(target)
                self._replaced[target.ino] = node.ino
                self._move_doubts(target.ino, node.ino)
                if not node.is_dir and target.memory_id is not None:
                    self._tombstone(node)
                    node.memory_id, node.base_path, node.base_sha = (
                        target.memory_id, target.base_path, target.base_sha)
                    node.sent_sha = target.sent_sha  # a lost answer for it is still ours
                    node.base_epoch = target.base_epoch
                    self._by_memory[node.memory_id] = node.ino
                    target.memory_id = target.sent_sha = None
                elif not node.is_dir and node.memory_id is None and node.sent_sha is None:
                    node.sent_sha = target.sent_sha  # the target's create may have landed
                    self._tombstone(target)
                else:
                    self._tombstone(target)
            del old_parent.children[node.name]
            node.parent, node.name = new_parent.ino, new_name
            new_parent.children[new_name] = node.ino
            node.ctime_ns = now
            old_parent.mtime_ns = old_parent.ctime_ns = now
            new_parent.mtime_ns = new_parent.ctime_ns = now
            for sub in self.walk(node):
                if sub.is_dir:
                    continue
                if self.is_local_only_name(sub):
                    # A memory renamed to a temp name leaves the server's view.
                    self._tombstone(sub)
                elif sub.memory_id is None:
                    self._revive(sub)
                else:
                    self._take_back(sub)
                self._touch(sub)
                self._save(sub)
            self._save(node)
            self._save(old_parent)
            if new_parent is not old_parent:
                self._save(new_parent)

    def ensure_dir(self, dir_path: str) -> Node | None:
        """The directory at dir_path, created (with its parents) if missing.

        None when a file stands in the way."""
        node = self._nodes[ROOT_INO]
        if dir_path == "/":
            return node
        created = []
        for seg in dir_path[1:].split("/"):
            child = self.child(node, seg)
            if child is None:
                now = time.time_ns()
                child = Node(self._next_ino, node.ino, seg, True, stat.S_IFDIR | 0o755,
                             os.getuid(), os.getgid(), now, now, now)
                self._next_ino += 1
                self._nodes[child.ino] = child
                node.children[seg] = child.ino
                created.append(child)
            elif not child.is_dir:
                return None
            node = child
        for c in created:
            self._save(c)
        if created:
            self.on_entry(created[0].parent, created[0].name)
        return node

    def prune(self, directory: Node) -> list[tuple[int, str]]:
        """Remove directories left empty by remote changes; returns (parent, name) gone."""
        gone = []
        while directory.ino != ROOT_INO and directory.is_dir and not directory.children:
            parent = self._nodes[directory.parent]
            del parent.children[directory.name]
            del self._nodes[directory.ino]
            self.db.execute("DELETE FROM nodes WHERE ino=?", (directory.ino,))
            gone.append((parent.ino, directory.name))
            self.on_entry(parent.ino, directory.name)
            directory = parent
        return gone


def check_new_path(state: State, parent: Node, name: str, *, is_dir: bool) -> None:
    """Raise paths.PathError when parent/name can never be (or hold) a memory."""
    paths.validate_segment(name, where="name")
    if parent.ino == ROOT_INO and name in (PARK_NAME, META_NAME):
        raise paths.PathError("invalid", f"/{name} is reserved by memfs")
    path = paths.join(state.path_of(parent), name)
    # A directory must leave room for a file inside it.
    probe = path + "/x" if is_dir else path
    paths.validate_path(probe)
