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
handlers do); memfs/state/transitions.py holds every transition the sync side makes.

Trio: every method is synchronous and commits one transaction with no
checkpoint inside, so each is atomic with respect to every other task (and to
a crash): that is all the locking the single-threaded daemon needs. A run of
methods called with no checkpoint between them can share one commit
(:meth:`State.batch`: a first listing's thousands of new files).
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
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
    PushTicket,
    Tombstone,
    is_parked,
)
from memfs.state.schema import (
    CONFLICT_COLUMNS,
    DOUBT_COLUMNS,
    NODE_COLUMNS,
    TOMBSTONE_COLUMNS,
    create_or_migrate,
)
from memfs.state.transitions import SyncTransitions

__all__ = ["DEFAULT_LOCAL_ONLY_PATTERNS", "EMPTY_SHA", "PARK_DIR", "PARK_NAME", "ROOT_INO",
           "Node", "State", "Tombstone", "check_new_path", "is_parked"]

log = logging.getLogger(__name__)


class State(SyncTransitions):
    """The in-memory tree backed by state.db (WAL, synchronous=NORMAL)."""

    def __init__(self, db_path: Path, *, local_only_patterns=DEFAULT_LOCAL_ONLY_PATTERNS):
        self.db_path = Path(db_path)
        self.db = sqlite3.connect(str(db_path), isolation_level=None, check_same_thread=False)
        os.chmod(db_path, 0o600)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        create_or_migrate(self.db)
        self.local_only_patterns = tuple(local_only_patterns)
        self.nodes: dict[int, Node] = {}
        self.tombstones: dict[str, Tombstone] = {}
        self.by_memory: dict[str, int] = {}
        self.conflicted: dict[str, int] = {}  # memory_id -> unresolved conflict rows
        self.parks: dict[str, str] = {}  # memory_id -> park path we sent it to
        #: Requests whose outcome is unknown, by their `doubts` row id (see schema).
        self.doubts: dict[int, PushTicket] = {}
        #: sha -> a memory that held it once (changed or deleted since; its versions
        #: keep it): the source of content taken from the server and never read, once
        #: no memory holds it any more (memory only; see SyncTransitions._note_source).
        self.former_sources: dict[str, str] = {}
        #: Inodes whose open buffer holds writes not yet closed (set by the open files,
        #: memfs/mount/open_files.py). A remote change never replaces such a file's
        #: content; it waits for the close.
        self.open_dirty: set[int] = set()
        #: ino -> ino that took its place by rename-over (memory only): a create in
        #: flight for the replaced node settles on its successor.
        self.replaced: dict[int, int] = {}
        #: Counter of base changes from server answers (see Node.base_epoch).
        self.epoch = 0
        #: Inodes of files saved since the pusher last saw them clean: the pusher's
        #: work list, so a write never costs a scan of the whole store.
        self.maybe_dirty: set[int] = set()
        # Called with (parent_ino, name) of every directory prune() removes and of the
        # topmost one ensure_dir() creates, so the daemon can drop the kernel's cached
        # entry, positive or negative (set by the SyncContext).
        self.on_entry: Callable[[int, str], None] = lambda parent, name: None
        # Called with an inode whose content is about to change, or which left the tree
        # (then with its node, as it was), and with None when the whole tree was
        # reloaded: the handlers' fast-open set (memfs/mount/fastopen.py) must never outlive
        # what it promised about a file, and an open racing the removal finds the node.
        self.on_content: Callable[..., None] = lambda ino, gone=None: None
        # Called with the inode of a file that came from the server: new to the kernel too.
        self.on_added: Callable[[int], None] = lambda ino: None
        self._batch = False  # inside batch(): transactions join its own
        self._load()

    # -- loading and persistence ------------------------------------------

    def _load(self, reuse: dict[int, Node] | None = None) -> None:
        cur = self.db.execute(f"SELECT {', '.join(NODE_COLUMNS)} FROM nodes")
        for row in cur:
            values = dict(zip(NODE_COLUMNS, row, strict=True))
            values["is_dir"] = bool(values["is_dir"])
            node = (reuse or {}).get(values["ino"])
            if node is None:
                node = Node(**values)
            else:  # update in place: open files hold references to their nodes
                for key, value in values.items():
                    setattr(node, key, value)
                node.children = {}
            self.nodes[node.ino] = node
        if ROOT_INO not in self.nodes:
            now = time.time_ns()
            root = Node(ROOT_INO, 0, "", True, stat.S_IFDIR | 0o755, os.getuid(), os.getgid(),
                        now, now, now)
            self.nodes[ROOT_INO] = root
            with self.transaction():
                self._save(root)
        for node in self.nodes.values():
            if node.ino != ROOT_INO:
                parent = self.nodes.get(node.parent)
                if parent is None:  # should not happen; keep the file reachable
                    log.warning("node %d has no parent %d; moving it to the root",
                                node.ino, node.parent)
                    node.parent = ROOT_INO
                    parent = self.nodes[ROOT_INO]
                parent.children[node.name] = node.ino
            if node.memory_id:
                self.by_memory[node.memory_id] = node.ino
        cols = ", ".join(TOMBSTONE_COLUMNS)
        for row in self.db.execute(f"SELECT {cols} FROM tombstones"):
            tomb = Tombstone(**dict(zip(TOMBSTONE_COLUMNS, row, strict=True)))
            self.tombstones[tomb.memory_id] = tomb
        self.parks = dict(self.db.execute("SELECT memory_id, path FROM parks"))
        self.doubts = {}
        for row in self.db.execute(f"SELECT {', '.join(DOUBT_COLUMNS)} FROM doubts"):
            values = dict(zip(DOUBT_COLUMNS, row, strict=True))
            ticket = PushTicket(*row[:-1], doubt=values["id"])
            ticket = replace(ticket, content_sent=bool(ticket.content_sent),
                             path_sent=bool(ticket.path_sent))
            self.doubts[values["id"]] = ticket
        for (mid,) in self.db.execute("SELECT memory_id FROM conflicts WHERE memory_id NOT NULL"):
            self.conflicted[mid] = self.conflicted.get(mid, 0) + 1
        self._next_ino = max(max(self.nodes) + 1, getattr(self, "_next_ino", 0))
        self.maybe_dirty = {ino for ino, n in self.nodes.items() if not n.is_dir}
        self._recount()

    def _reload(self) -> None:
        """Bring the in-memory tree back to what state.db holds.

        Mutations change memory first and commit second; when a commit fails
        (disk full, I/O error) this undoes the memory side, so the tree never
        shows what was not made durable."""
        old = self.nodes
        self.nodes, self.by_memory, self.tombstones, self.conflicted = {}, {}, {}, {}
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
            self.maybe_dirty.add(node.ino)
            # Whatever makes a file count against the cap (its name, refusal,
            # memory id, sha) is a column of its row: it changes only with a save.
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

    def save(self, *nodes: Node) -> None:
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

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str | None) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def close(self) -> None:
        self.db.close()

    # -- queries ---------------------------------------------------------------

    def path_of(self, node: Node | int) -> str:
        if isinstance(node, int):
            node = self.nodes[node]
        parts = []
        while node.ino != ROOT_INO:
            parts.append(node.name)
            node = self.nodes[node.parent]
        return "/" + "/".join(reversed(parts))

    def in_tree(self, node: Node) -> bool:
        return self.nodes.get(node.ino) is node

    def lookup_path(self, path: str) -> Node | None:
        node = self.nodes[ROOT_INO]
        if path == "/":
            return node
        for seg in path[1:].split("/"):
            if not node.is_dir:
                return None
            ino = node.children.get(seg)
            if ino is None:
                return None
            node = self.nodes[ino]
        return node

    def child(self, parent: Node, name: str) -> Node | None:
        ino = parent.children.get(name)
        return None if ino is None else self.nodes[ino]

    def holder(self, memory_id: str) -> Node | None:
        """The file that holds memory_id now, if any."""
        ino = self.by_memory.get(memory_id)
        return None if ino is None else self.nodes.get(ino)

    def dirty_files(self) -> list[Node]:
        """The dirty files, from `maybe_dirty` (pruned as it goes): O(pending), not
        O(store)."""
        out = []
        for ino in list(self.maybe_dirty):
            node = self.nodes.get(ino)
            if node is not None and self.is_dirty(node):
                out.append(node)
            else:
                self.maybe_dirty.discard(ino)
        return out

    def files(self) -> Iterator[Node]:
        return (n for n in self.nodes.values() if not n.is_dir)

    def walk(self, node: Node) -> Iterator[Node]:
        """The node and everything below it."""
        yield node
        for ino in list(node.children.values()):
            yield from self.walk(self.nodes[ino])

    def is_local_only_name(self, node: Node) -> bool:
        """Editor/tool temp files, matched by name anywhere in the tree."""
        # Same as fnmatchcase over every pattern, as one compiled regex: this runs for every
        # file in every pusher scan.
        pats = self.local_only_patterns
        cached = self.__dict__.get("_local_only_rx")
        if cached is None or cached[0] != pats:
            rx = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in pats) or "(?!)")
            cached = self._local_only_rx = (pats, rx)
        return cached[1].match(node.name) is not None

    def is_refused(self, node: Node) -> bool:
        return node.refused_sha is not None and node.refused_sha == node.sha

    def sync_state(self, node: Node) -> str:
        """One word for `user.memfs.state` and status: where this file stands."""
        if node.is_dir:
            return "directory"
        if self.is_local_only_name(node):
            return "local-only"
        if self.is_refused(node):
            return "refused"
        if node.memory_id is not None and node.memory_id in self.conflicted:
            return "conflict"
        if self.is_dirty(node):
            return "error" if node.error else "pending"
        return "synced"

    def is_dirty(self, node: Node) -> bool:
        """Local differs from base: the pusher has work for this file."""
        if node.is_dir or self.is_local_only_name(node):
            return False
        if node.memory_id is None:
            return True
        return node.sha != node.base_sha or self.path_of(node) != node.base_path

    def _counts(self, node: Node) -> bool:
        """Whether a file is (or will be) a memory: counted against the 2,000 cap."""
        return not (node.is_dir or self.is_local_only_name(node)
                    or (self.is_refused(node) and node.memory_id is None))

    def memory_count(self) -> int:
        """Files that are (or will be) memories: what counts against the 2,000 cap."""
        return sum(1 for n in self.files() if self._counts(n))

    def _recount(self) -> None:
        self._counted = {ino for ino, n in self.nodes.items() if self._counts(n)}
        self._counted_for = self.local_only_patterns

    def at_capacity(self) -> bool:
        """memory_count() >= MAX_MEMORIES_PER_STORE, without a scan of the store
        unless it is close to full. `_counted` holds every counted file (each save
        adds or drops the saved file) and maybe files gone since (a removal leaves
        its inode), so its size bounds the count from above; near the cap it is
        rebuilt by a scan."""
        if (self._counted_for == self.local_only_patterns
                and len(self._counted) < paths.MAX_MEMORIES_PER_STORE):
            return False
        self._recount()
        return len(self._counted) >= paths.MAX_MEMORIES_PER_STORE

    def conflicts(self) -> list[dict]:
        rows = self.db.execute(f"SELECT {', '.join(CONFLICT_COLUMNS)} FROM conflicts ORDER BY id")
        return [dict(zip(CONFLICT_COLUMNS, r, strict=True)) for r in rows]

    def get_conflict(self, cid: int) -> dict | None:
        row = self.db.execute(
            f"SELECT {', '.join(CONFLICT_COLUMNS)} FROM conflicts WHERE id=?", (cid,)).fetchone()
        return None if row is None else dict(zip(CONFLICT_COLUMNS, row, strict=True))

    def referenced_shas(self) -> set[str]:
        shas = {n.sha for n in self.files() if n.sha}
        for local, remote in self.db.execute("SELECT local_sha, remote_sha FROM conflicts"):
            shas.update(s for s in (local, remote) if s)
        return shas

    # -- local mutations (called by the filesystem) -------------------------------

    def _touch(self, node: Node) -> None:
        """A local change to a file's content, place or identity."""
        node.gen += 1
        node.changed_at = time.time()
        if node.dirty_since is None:
            node.dirty_since = node.changed_at
        node.fail_count, node.retry_at, node.error = 0, None, None

    def set_open_dirty(self, ino: int, dirty: bool) -> None:
        if dirty:
            self.open_dirty.add(ino)
        else:
            self.open_dirty.discard(ino)

    def new_node(self, parent: Node, name: str, *, is_dir: bool, mode: int, uid: int,
                 gid: int) -> Node:
        """Add a file or directory; a file at a tombstoned path revives that memory."""
        now = time.time_ns()
        node = Node(self._next_ino, parent.ino, name, is_dir, mode, uid, gid, now, now, now)
        self._next_ino += 1
        if not is_dir:
            node.sha = EMPTY_SHA
            self._touch(node)
        self.nodes[node.ino] = node
        parent.children[name] = node.ino
        parent.mtime_ns = parent.ctime_ns = now
        with self.transaction():
            if not is_dir:
                self._revive(node)
            self._save(node)
            self._save(parent)
        return node

    def _revive(self, node: Node) -> None:
        """Give a new file the memory of a pending delete at the same path."""
        if self.is_local_only_name(node):
            return
        path = self.path_of(node)
        for tomb in list(self.tombstones.values()):
            if tomb.base_path == path:
                node.memory_id, node.base_path, node.base_sha = (
                    tomb.memory_id, tomb.base_path, tomb.base_sha)
                node.sent_sha = tomb.sent_sha
                self.by_memory[tomb.memory_id] = node.ino
                self._drop_tombstone(tomb.memory_id)
                return

    def set_content(self, node: Node, sha: str, size: int) -> None:
        """A durable content change (close, fsync or truncate)."""
        now = time.time_ns()
        self.on_content(node.ino)
        node.sha, node.size = sha, size
        node.mtime_ns = node.ctime_ns = now
        self._touch(node)
        self.save(node)

    def orphan_content(self, node: Node, sha: str, size: int) -> None:
        """The new content of a file unlinked while open: the handles still open read
        it; it has no row left in state.db to write, and no memory to push."""
        assert node.ino not in self.nodes
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
        if given and node.ino in self.nodes:
            self.save(node)

    def remove(self, node: Node) -> None:
        """Unlink a file or remove an empty directory; a memory becomes a tombstone."""
        parent = self.nodes[node.parent]
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
        del self.nodes[node.parent].children[node.name]
        del self.nodes[node.ino]
        self.on_content(node.ino, node)
        self.db.execute("DELETE FROM nodes WHERE ino=?", (node.ino,))

    def _tombstone(self, node: Node) -> None:
        """Detach node's memory; its server delete waits out the delete delay."""
        if node.memory_id is None:
            return
        self.by_memory.pop(node.memory_id, None)
        tomb = Tombstone(node.memory_id, node.base_path or "", node.base_sha or "", time.time(),
                         sent_sha=node.sent_sha)
        self.tombstones[tomb.memory_id] = tomb
        self._save_tombstone(tomb)
        node.memory_id = node.base_path = node.base_sha = node.sent_sha = None

    def _drop_tombstone(self, memory_id: str) -> None:
        self.tombstones.pop(memory_id, None)
        self.db.execute("DELETE FROM tombstones WHERE memory_id=?", (memory_id,))

    def rename(self, node: Node, new_parent: Node, new_name: str, target: Node | None) -> None:
        """Move node; over an existing file the target keeps its memory id and history."""
        old_parent = self.nodes[node.parent]
        now = time.time_ns()
        with self.transaction():
            if target is not None:
                # The editors' atomic save: `node` takes the target's place and
                # identity; node's own memory (if any) is deleted after the delay.
                self._drop(target)
                self.replaced[target.ino] = node.ino
                self._move_doubts(target.ino, node.ino)
                if not node.is_dir and target.memory_id is not None:
                    self._tombstone(node)
                    node.memory_id, node.base_path, node.base_sha = (
                        target.memory_id, target.base_path, target.base_sha)
                    node.sent_sha = target.sent_sha  # a lost answer for it is still ours
                    node.base_epoch = target.base_epoch
                    self.by_memory[node.memory_id] = node.ino
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
                self._touch(sub)
                self._save(sub)
            self._save(node)
            self._save(old_parent)
            if new_parent is not old_parent:
                self._save(new_parent)

    def ensure_dir(self, dir_path: str) -> Node | None:
        """The directory at dir_path, created (with its parents) if missing.

        None when a file stands in the way."""
        node = self.nodes[ROOT_INO]
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
                self.nodes[child.ino] = child
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
            parent = self.nodes[directory.parent]
            del parent.children[directory.name]
            del self.nodes[directory.ino]
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
