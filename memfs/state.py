"""The mount's state: the tree, the local (desired) state and the base (server) state.

One `State` per mount. The whole tree lives in memory (a store holds at most
2,000 memories, so this is small) and every durable change is written through
to ``state.db`` in the same call, inside one SQLite transaction. Request
handlers therefore never touch the disk for lookups, getattr or readdir, and a
killed daemon finds everything it had acknowledged when it starts again.

The model (DESIGN §2): per file we keep what the server is known to hold (the
*base*: ``memory_id``, ``base_path``, ``base_sha``) and what the mount holds
now (the *local* state: its place in the tree and ``sha``). The pusher makes
the server match local; the reconciler moves the base when the server changes.
A deleted file whose memory is still on the server is a *tombstone* until its
delete goes out (or the path is re-created, which revives the memory).

Trio note: every method here is synchronous. Callers running in the trio
event loop get each method's changes atomically (there is no checkpoint
inside), which is all the locking the single-threaded daemon needs.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import sqlite3
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import paths

log = logging.getLogger(__name__)

ROOT_INO = 1
EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

#: Editor and tool temp files: kept in the mount, never uploaded.
DEFAULT_LOCAL_ONLY_PATTERNS = (
    ".*.swp", ".*.swo", ".*.swx", ".*.swpx", "*~", ".#*", "#*#", "4913",
)

SCHEMA = """
-- The canonical schema of state.db. Everything the daemon acknowledged to a
-- program is in here; blobs live in objects/ keyed by sha256.

-- Key/value facts about this mount: store_id, base_url, last_sync, ...
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT
);

-- One row per file or directory in the mount (the local tree), root included
-- (ino 1, parent 0, name '').
CREATE TABLE IF NOT EXISTS nodes (
    ino        INTEGER PRIMARY KEY,  -- stable FUSE inode number
    parent     INTEGER NOT NULL,     -- ino of the parent directory
    name       TEXT NOT NULL,        -- entry name (one path segment)
    is_dir     INTEGER NOT NULL,
    -- local state (what the mount holds)
    sha        TEXT,                 -- content sha256 of a file; NULL for dirs
    size       INTEGER NOT NULL DEFAULT 0,
    mode       INTEGER NOT NULL,     -- full st_mode, kept locally (not synced)
    uid        INTEGER NOT NULL,
    gid        INTEGER NOT NULL,
    atime_ns   INTEGER NOT NULL,
    mtime_ns   INTEGER NOT NULL,
    ctime_ns   INTEGER NOT NULL,
    -- base state (what the server held at the last listing or response);
    -- all NULL for a file that never reached the server
    memory_id  TEXT UNIQUE,
    base_path  TEXT,
    base_sha   TEXT,
    -- push bookkeeping
    changed_at REAL,                 -- wall time of the last durable local change
    sent_sha   TEXT,                 -- sha sent in a request whose outcome is unknown
    refused_sha TEXT,                -- the server refused this sha (400/413); retry
    refused_reason TEXT,             --   only after the content changes
    UNIQUE (parent, name)
);

-- Memories deleted locally whose server delete has not gone out yet
-- (the delete delay). A file re-created at base_path revives the memory.
CREATE TABLE IF NOT EXISTS tombstones (
    memory_id  TEXT PRIMARY KEY,
    base_path  TEXT NOT NULL,
    base_sha   TEXT NOT NULL,
    deleted_at REAL NOT NULL
);

-- Local versions that lost to a concurrent server change. The server's
-- version is in the tree; the local one is kept here (blob in objects/)
-- until the user restores or discards it. Never dropped silently.
CREATE TABLE IF NOT EXISTS conflicts (
    id          INTEGER PRIMARY KEY,
    path        TEXT NOT NULL,       -- path of the file when the conflict happened
    memory_id   TEXT,
    local_sha   TEXT NOT NULL,       -- the preserved local content
    remote_sha  TEXT,                -- the server content that won (NULL: deleted)
    reason      TEXT NOT NULL,
    created_at  REAL NOT NULL
);
"""


@dataclass
class Node:
    ino: int
    parent: int
    name: str
    is_dir: bool
    mode: int
    uid: int = 0
    gid: int = 0
    atime_ns: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0
    sha: str | None = None
    size: int = 0
    memory_id: str | None = None
    base_path: str | None = None
    base_sha: str | None = None
    changed_at: float | None = None
    sent_sha: str | None = None
    refused_sha: str | None = None
    refused_reason: str | None = None
    children: dict[str, int] = field(default_factory=dict, repr=False)


_COLUMNS = (
    "ino", "parent", "name", "is_dir", "sha", "size", "mode", "uid", "gid",
    "atime_ns", "mtime_ns", "ctime_ns", "memory_id", "base_path", "base_sha",
    "changed_at", "sent_sha", "refused_sha", "refused_reason",
)


@dataclass
class Tombstone:
    memory_id: str
    base_path: str
    base_sha: str
    deleted_at: float


class State:
    """The in-memory tree backed by state.db (WAL, synchronous=NORMAL)."""

    def __init__(self, db_path: Path, *, local_only_patterns=DEFAULT_LOCAL_ONLY_PATTERNS):
        self.db_path = Path(db_path)
        self.db = sqlite3.connect(str(db_path), isolation_level=None, check_same_thread=False)
        os.chmod(db_path, 0o600)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        self.local_only_patterns = tuple(local_only_patterns)
        self.nodes: dict[int, Node] = {}
        self.tombstones: dict[str, Tombstone] = {}
        self.by_memory: dict[str, int] = {}
        self.conflicted: dict[str, int] = {}  # memory_id -> unresolved conflict rows
        # Called with (parent_ino, name) for every directory prune() removes, so the
        # daemon can drop the kernel's cached entry (set by the SyncContext).
        self.on_pruned = None
        self._load()

    # -- loading and persistence ------------------------------------------

    def _load(self, reuse: dict[int, Node] | None = None) -> None:
        cur = self.db.execute(f"SELECT {', '.join(_COLUMNS)} FROM nodes")
        for row in cur:
            values = dict(zip(_COLUMNS, row, strict=True))
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
        for mid, bpath, bsha, dat in self.db.execute(
            "SELECT memory_id, base_path, base_sha, deleted_at FROM tombstones"
        ):
            self.tombstones[mid] = Tombstone(mid, bpath, bsha, dat)
        for (mid,) in self.db.execute("SELECT memory_id FROM conflicts WHERE memory_id NOT NULL"):
            self.conflicted[mid] = self.conflicted.get(mid, 0) + 1
        self._next_ino = max(max(self.nodes) + 1, getattr(self, "_next_ino", 0))

    def _reload(self) -> None:
        """Bring the in-memory tree back to what state.db holds.

        Mutations change memory first and commit second; when a commit fails
        (disk full, I/O error) this undoes the memory side, so the tree never
        shows what was not made durable."""
        old = self.nodes
        self.nodes, self.by_memory, self.tombstones, self.conflicted = {}, {}, {}, {}
        self._load(reuse=old)

    class _Txn:
        def __init__(self, state: State) -> None:
            self.state = state

        def __enter__(self):
            self.state.db.execute("BEGIN")

        def __exit__(self, exc_type, *_):
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

    def _save(self, node: Node) -> None:
        values = [getattr(node, c) for c in _COLUMNS]
        values[3] = int(node.is_dir)
        self.db.execute(
            f"INSERT OR REPLACE INTO nodes ({', '.join(_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(_COLUMNS))})",
            values,
        )

    def save(self, *nodes: Node) -> None:
        """Write nodes through to state.db in one transaction."""
        with self.transaction():
            for node in nodes:
                self._save(node)

    def sync_to_disk(self) -> None:
        """Make everything committed so far survive a power loss (fsync)."""
        self.db.execute("PRAGMA wal_checkpoint(FULL)")

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
        # file in every pusher scan (perf: a scan per kick made `cp -r` quadratic-ish).
        pats = self.local_only_patterns
        cached = self.__dict__.get("_local_only_rx")
        if cached is None or cached[0] != pats:
            rx = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in pats) or "(?!)")
            cached = self._local_only_rx = (pats, rx)
        return cached[1].match(node.name) is not None

    def sync_state(self, node: Node) -> str:
        """One word for `user.memfs.state` and status: where this file stands."""
        if node.is_dir:
            return "directory"
        if self.is_local_only_name(node):
            return "local-only"
        if node.refused_sha is not None and node.refused_sha == node.sha:
            return "refused"
        if node.memory_id is not None and node.memory_id in self.conflicted:
            return "conflict"
        if self.is_dirty(node):
            return "pending"
        return "synced"

    def is_dirty(self, node: Node) -> bool:
        """Local differs from base: the pusher has work for this file."""
        if node.is_dir or self.is_local_only_name(node):
            return False
        if node.memory_id is None:
            return True
        return node.sha != node.base_sha or self.path_of(node) != node.base_path

    def memory_count(self) -> int:
        """Files that are (or will be) memories: what counts against the 2,000 cap."""
        return sum(
            1 for n in self.files()
            if not self.is_local_only_name(n)
            and not (n.refused_sha is not None and n.refused_sha == n.sha and n.memory_id is None)
        )

    # -- local mutations (called by the filesystem) -------------------------------

    def new_node(self, parent: Node, name: str, *, is_dir: bool, mode: int, uid: int,
                 gid: int) -> Node:
        """Add a file or directory; a file at a tombstoned path revives that memory."""
        now = time.time_ns()
        node = Node(self._next_ino, parent.ino, name, is_dir, mode, uid, gid, now, now, now)
        self._next_ino += 1
        if not is_dir:
            node.sha = EMPTY_SHA
            node.changed_at = time.time()
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
                self.by_memory[tomb.memory_id] = node.ino
                self._drop_tombstone(tomb.memory_id)
                return

    def set_content(self, node: Node, sha: str, size: int) -> None:
        """A durable content change (close, fsync or truncate)."""
        now = time.time_ns()
        node.sha, node.size = sha, size
        node.mtime_ns = node.ctime_ns = now
        node.changed_at = time.time()
        self.save(node)

    def remove(self, node: Node) -> None:
        """Unlink a file or remove an empty directory; a memory becomes a tombstone."""
        parent = self.nodes[node.parent]
        del parent.children[node.name]
        del self.nodes[node.ino]
        now = time.time_ns()
        parent.mtime_ns = parent.ctime_ns = now
        with self.transaction():
            self._tombstone(node)
            self.db.execute("DELETE FROM nodes WHERE ino=?", (node.ino,))
            self._save(parent)

    def _tombstone(self, node: Node) -> None:
        """Detach node's memory; its server delete waits out the delete delay."""
        if node.memory_id is None:
            return
        self.by_memory.pop(node.memory_id, None)
        tomb = Tombstone(node.memory_id, node.base_path or "", node.base_sha or "", time.time())
        self.tombstones[tomb.memory_id] = tomb
        self.db.execute(
            "INSERT OR REPLACE INTO tombstones VALUES (?, ?, ?, ?)",
            (tomb.memory_id, tomb.base_path, tomb.base_sha, tomb.deleted_at),
        )
        node.memory_id = node.base_path = node.base_sha = None

    def _drop_tombstone(self, memory_id: str) -> None:
        self.tombstones.pop(memory_id, None)
        self.db.execute("DELETE FROM tombstones WHERE memory_id=?", (memory_id,))

    def drop_tombstone(self, memory_id: str) -> None:
        with self.transaction():
            self._drop_tombstone(memory_id)

    def rename(self, node: Node, new_parent: Node, new_name: str, target: Node | None) -> None:
        """Move node; over an existing file the target keeps its memory id and history."""
        old_parent = self.nodes[node.parent]
        now = time.time_ns()
        with self.transaction():
            if target is not None:
                # The editors' atomic save: `node` takes the target's place and
                # identity; node's own memory (if any) is deleted after the delay.
                del new_parent.children[new_name]
                del self.nodes[target.ino]
                self.db.execute("DELETE FROM nodes WHERE ino=?", (target.ino,))
                if not node.is_dir and target.memory_id is not None:
                    self._tombstone(node)
                    node.memory_id, node.base_path, node.base_sha = (
                        target.memory_id, target.base_path, target.base_sha)
                    self.by_memory[node.memory_id] = node.ino
                    target.memory_id = None
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
                sub.changed_at = time.time()
                self._save(sub)
            self._save(node)
            self._save(old_parent)
            if new_parent is not old_parent:
                self._save(new_parent)

    # -- base mutations (called by the pusher and reconciler) -------------------

    def set_base(self, node: Node, memory_id: str, path: str, sha: str) -> None:
        """The server now holds `sha` at `path` for this node (a response or listing)."""
        if node.memory_id and node.memory_id != memory_id:
            self.by_memory.pop(node.memory_id, None)
        node.memory_id, node.base_path, node.base_sha = memory_id, path, sha
        node.sent_sha = None
        self.by_memory[memory_id] = node.ino
        self.save(node)

    def set_sent(self, node: Node, sha: str | None) -> None:
        node.sent_sha = sha
        self.save(node)

    def set_refused(self, node: Node, sha: str | None, reason: str | None) -> None:
        node.refused_sha, node.refused_reason = sha, reason
        node.sent_sha = None
        self.save(node)

    def forget_memory(self, node: Node) -> None:
        """The server no longer has node's memory: it becomes a new (unsynced) file."""
        if node.memory_id:
            self.by_memory.pop(node.memory_id, None)
        node.memory_id = node.base_path = node.base_sha = None
        self.save(node)

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
        if created:
            self.save(*created)
        return node

    def add_remote(self, memory_id: str, path: str, sha: str, size: int) -> Node | None:
        """A memory new to this mount: add its file (content fetched lazily)."""
        dir_path, name = paths.split(path)
        parent = self.ensure_dir(dir_path)
        if parent is None or name in parent.children:
            return None
        now = time.time_ns()
        node = Node(self._next_ino, parent.ino, name, False, stat.S_IFREG | 0o644,
                    os.getuid(), os.getgid(), now, now, now, sha=sha, size=size,
                    memory_id=memory_id, base_path=path, base_sha=sha)
        self._next_ino += 1
        self.nodes[node.ino] = node
        parent.children[name] = node.ino
        self.by_memory[memory_id] = node.ino
        self.save(node)
        return node

    def move_to(self, node: Node, path: str) -> bool:
        """Move node to path (a remote rename); False when the place is taken."""
        dir_path, name = paths.split(path)
        parent = self.ensure_dir(dir_path)
        if parent is None or name in parent.children:
            return False
        old_parent = self.nodes[node.parent]
        del old_parent.children[node.name]
        node.parent, node.name = parent.ino, name
        parent.children[name] = node.ino
        node.ctime_ns = time.time_ns()
        self.save(node)
        self.prune(old_parent)
        return True

    def drop(self, node: Node) -> None:
        """Remove a file the server deleted (no tombstone: nothing to send)."""
        if node.memory_id:
            self.by_memory.pop(node.memory_id, None)
        parent = self.nodes[node.parent]
        del parent.children[node.name]
        del self.nodes[node.ino]
        with self.transaction():
            self.db.execute("DELETE FROM nodes WHERE ino=?", (node.ino,))
        self.prune(parent)

    def prune(self, directory: Node) -> list[tuple[int, str]]:
        """Remove directories left empty by remote changes; returns (parent, name) gone."""
        gone = []
        while directory.ino != ROOT_INO and directory.is_dir and not directory.children:
            parent = self.nodes[directory.parent]
            del parent.children[directory.name]
            del self.nodes[directory.ino]
            with self.transaction():
                self.db.execute("DELETE FROM nodes WHERE ino=?", (directory.ino,))
            gone.append((parent.ino, directory.name))
            if self.on_pruned is not None:
                self.on_pruned(parent.ino, directory.name)
            directory = parent
        return gone

    def add_conflict(self, path: str, memory_id: str | None, local_sha: str,
                     remote_sha: str | None, reason: str) -> int:
        cur = self.db.execute(
            "INSERT INTO conflicts (path, memory_id, local_sha, remote_sha, reason, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (path, memory_id, local_sha, remote_sha, reason, time.time()),
        )
        if memory_id:
            self.conflicted[memory_id] = self.conflicted.get(memory_id, 0) + 1
        return int(cur.lastrowid)

    def get_conflict(self, cid: int) -> dict | None:
        return next((c for c in self.conflicts() if c["id"] == cid), None)

    def remove_conflict(self, cid: int) -> None:
        row = self.get_conflict(cid)
        if row is None:
            return
        self.db.execute("DELETE FROM conflicts WHERE id=?", (cid,))
        mid = row["memory_id"]
        if mid and mid in self.conflicted:
            self.conflicted[mid] -= 1
            if self.conflicted[mid] <= 0:
                del self.conflicted[mid]

    def conflicts(self) -> list[dict]:
        cols = ("id", "path", "memory_id", "local_sha", "remote_sha", "reason", "created_at")
        rows = self.db.execute(f"SELECT {', '.join(cols)} FROM conflicts ORDER BY id")
        return [dict(zip(cols, r, strict=True)) for r in rows]

    def referenced_shas(self) -> set[str]:
        shas = {n.sha for n in self.files() if n.sha}
        for local, remote in self.db.execute("SELECT local_sha, remote_sha FROM conflicts"):
            shas.update(s for s in (local, remote) if s)
        return shas


def check_new_path(state: State, parent: Node, name: str, *, is_dir: bool) -> None:
    """Raise paths.PathError when parent/name can never be (or hold) a memory."""
    paths.validate_segment(name, where="name")
    path = paths.join(state.path_of(parent), name)
    # A directory must leave room for a file inside it.
    probe = path + "/x" if is_dir else path
    paths.validate_path(probe)
