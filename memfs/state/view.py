"""The read side of a mount's ``state.db``: the tree and what it says, never a write.

`StateView` opens state.db read-only (an SQLite ``mode=ro`` URI: it never migrates,
never creates a row, and works on a state directory a daemon holds or an older memfs
left) and answers every question the offline readers ask — ``memfs status`` with no
daemon, adoption of an earlier state directory (memfs/state/statedir.py) — with the
code the daemon's own `State` (memfs/state/state.py, its subclass) answers them with:
one `path_of`, one `is_dirty`, one reading of the meta table, one list of local-only
names (the mount's configured ones, which `State` records in the meta table).

Outside memfs/state the containers are read-only (`MappingProxyType`, `SetView`):
only `State` and its transitions change them, each change written through to
state.db (docs/ARCHITECTURE.md, "Who may change what"; tests/test_ownership.py).
:func:`read_meta` is the light read for callers that want a few meta values of many
state directories (which store, mounted where) without loading a tree.
"""

from __future__ import annotations

import collections.abc
import fnmatch
import json
import logging
import os
import re
import sqlite3
import stat
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

from memfs.core import paths
from memfs.core.mountconfig import DEFAULT_LOCAL_ONLY_PATTERNS
from memfs.core.nodes import ROOT_INO, Node, PushTicket, Tombstone
from memfs.core.slug import unique
from memfs.state.schema import CONFLICT_COLUMNS, DOUBT_COLUMNS, NODE_COLUMNS, TOMBSTONE_COLUMNS

#: The meta key under which `State` records the mount's local-only patterns, so an
#: offline reader tells local-only files as the mount does.
LOCAL_ONLY_KEY = "local_only_patterns"

#: The meta key under which a mount records that its store was "archived" or
#: "deleted" on the server, so `memfs status` and `memfs unmount` say so once its
#: daemon is gone: no mount will send what the journal holds.
GONE_KEY = "store_gone"

T = TypeVar("T")

log = logging.getLogger(__name__)


class SetView(collections.abc.Set[T]):
    """A read-only window on a set that its owner keeps changing (no copy)."""

    __slots__ = ("_items",)

    def __init__(self, items: collections.abc.Collection[T]) -> None:
        self._items = items

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"SetView({self._items!r})"


def connect_readonly(db_path: Path) -> sqlite3.Connection:
    """A connection that cannot write db_path (nor create it when it is missing)."""
    return sqlite3.connect(Path(db_path).absolute().as_uri() + "?mode=ro", uri=True,
                           check_same_thread=False)


def meta_of(db: sqlite3.Connection, keys: Iterable[str]) -> dict[str, str]:
    """The meta values of keys that state.db holds (a key it lacks is left out)."""
    keys = list(keys)
    rows = db.execute(f"SELECT key, value FROM meta WHERE key IN ({', '.join('?' * len(keys))})",
                      keys)
    return {k: v for k, v in rows if v is not None}


def read_meta(db_path: Path, *keys: str) -> dict[str, str]:
    """Meta values of the state.db at db_path, read-only; empty when it cannot be read
    (missing, not a database, an older memfs's without a meta table)."""
    try:
        db = connect_readonly(db_path)
        try:
            return meta_of(db, keys)
        finally:
            db.close()
    except sqlite3.Error:
        return {}


class StateUnreadable(sqlite3.Error):
    """A state.db the view cannot read (missing, not a database): the message says
    which and why, in one line."""


class StateView:
    """The in-memory tree of a state.db, loaded whole (a store holds at most 2,000
    memories), with every read the daemon and the offline commands share."""

    def __init__(self, db_path: Path, *,
                 local_only_patterns: Sequence[str] | None = None) -> None:
        self.db_path = Path(db_path)
        try:
            self.db = self._connect()
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from None
        try:
            if local_only_patterns is None:
                local_only_patterns = self.recorded_patterns() or DEFAULT_LOCAL_ONLY_PATTERNS
            self._use_patterns(local_only_patterns)
            self._nodes: dict[int, Node] = {}
            self._tombstones: dict[str, Tombstone] = {}
            self._by_memory: dict[str, int] = {}
            self._conflicted: dict[str, int] = {}  # memory_id -> unresolved conflict rows
            self._parks: dict[str, str] = {}  # memory_id -> park path we sent it to
            #: sha -> a memory that held it once (the `sources` table, oldest first).
            self._former_sources: dict[str, str] = {}
            #: Memory ids this mount has held (the `known` table, oldest first), each
            #: with the newest version of it seen (None: none yet).
            self._known: dict[str, str | None] = {}
            #: Requests whose outcome is unknown, by their `doubts` row id (see schema).
            self._doubts: dict[int, PushTicket] = {}
            #: Inodes of files saved since the pusher last saw them clean: the pusher's
            #: work list, so a write never costs a scan of the whole store.
            self._maybe_dirty: set[int] = set()
            self._load()
        except sqlite3.Error as exc:
            self.db.close()
            raise self._unreadable(exc) from None
        except BaseException:
            self.db.close()
            raise

    def _connect(self) -> sqlite3.Connection:
        return connect_readonly(self.db_path)

    def _unreadable(self, exc: sqlite3.Error) -> sqlite3.Error:
        return StateUnreadable(f"cannot read {self.db_path}: {exc}")

    # -- the containers, read-only (State changes them, and state.db with them) ---------

    @property
    def nodes(self) -> Mapping[int, Node]:
        return MappingProxyType(self._nodes)

    @property
    def tombstones(self) -> Mapping[str, Tombstone]:
        return MappingProxyType(self._tombstones)

    @property
    def by_memory(self) -> Mapping[str, int]:
        return MappingProxyType(self._by_memory)

    @property
    def parks(self) -> Mapping[str, str]:
        return MappingProxyType(self._parks)

    @property
    def doubts(self) -> Mapping[int, PushTicket]:
        return MappingProxyType(self._doubts)

    @property
    def former_sources(self) -> Mapping[str, str]:
        return MappingProxyType(self._former_sources)

    @property
    def known(self) -> SetView[str]:
        return SetView(self._known)

    def seen_version(self, memory_id: str) -> str | None:
        """The newest version of memory_id this mount has seen (None: none, or it is
        not known): a request sent from now on, had it been applied, made a newer one."""
        return self._known.get(memory_id)

    # -- loading -------------------------------------------------------------------

    def _columns(self, table: str, wanted: Sequence[str]) -> tuple[str, ...]:
        """The columns of `wanted` that table has: all of them once migrated; a state.db
        of an older memfs, read without migrating it, may lack the later ones (their
        fields keep the defaults a migration would give them) or the table."""
        have = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
        return tuple(c for c in wanted if c in have)

    def _load(self, reuse: dict[int, Node] | None = None) -> None:
        cols = self._columns("nodes", NODE_COLUMNS)
        for row in self.db.execute(f"SELECT {', '.join(cols)} FROM nodes"):
            values = dict(zip(cols, row, strict=True))
            values["is_dir"] = bool(values["is_dir"])
            node = (reuse or {}).get(values["ino"])
            if node is None:
                node = Node(**values)
            else:  # update in place: open files hold references to their nodes
                for key, value in values.items():
                    setattr(node, key, value)
                node.children = {}
            self._nodes[node.ino] = node
        if ROOT_INO not in self._nodes:
            now = time.time_ns()
            root = Node(ROOT_INO, 0, "", True, stat.S_IFDIR | 0o755, os.getuid(), os.getgid(),
                        now, now, now)
            self._nodes[ROOT_INO] = root
            self._root_made(root)
        orphans = []
        for node in self._nodes.values():
            if node.ino != ROOT_INO:
                parent = self._nodes.get(node.parent)
                if parent is None:
                    orphans.append(node)
                else:
                    parent.children[node.name] = node.ino
            if node.memory_id:
                self._by_memory[node.memory_id] = node.ino
        for node in orphans:
            self._to_root(node, f"has no parent {node.parent}")
        self._attach_cycles()
        cols = self._columns("tombstones", TOMBSTONE_COLUMNS)
        for row in self.db.execute(f"SELECT {', '.join(cols)} FROM tombstones"):
            tomb = Tombstone(**dict(zip(cols, row, strict=True)))
            self._tombstones[tomb.memory_id] = tomb
        if self._columns("parks", ("memory_id", "path")):
            self._parks = dict(self.db.execute("SELECT memory_id, path FROM parks"))
        if self._columns("sources", ("sha", "memory_id")):
            self._former_sources = dict(self.db.execute(
                "SELECT sha, memory_id FROM sources ORDER BY rowid"))
        cols = self._columns("known", ("memory_id", "version"))
        if cols:
            self._known = {row[0]: (row[1] if len(row) > 1 else None) for row in self.db.execute(
                f"SELECT {', '.join(cols)} FROM known ORDER BY rowid")}
        self._doubts = {}
        cols = self._columns("doubts", DOUBT_COLUMNS)
        if set(DOUBT_COLUMNS) - set(cols) <= {"after_version"}:
            for row in self.db.execute(f"SELECT {', '.join(cols)} FROM doubts"):
                values = dict(zip(cols, row, strict=True))
                values["doubt"] = values.pop("id")
                ticket = PushTicket(**values)
                ticket = replace(ticket, content_sent=bool(ticket.content_sent),
                                 path_sent=bool(ticket.path_sent))
                self._doubts[ticket.doubt] = ticket
        if self._columns("conflicts", ("memory_id",)):
            for (mid,) in self.db.execute(
                    "SELECT memory_id FROM conflicts WHERE memory_id NOT NULL"):
                self._conflicted[mid] = self._conflicted.get(mid, 0) + 1
        # Never a number state.db still names: a doubt keeps the inode of a file unlinked
        # while its request was out, and a new file given that number would take its
        # answer (a memory the user deleted would come back on a directory made after a
        # restart) and wait behind its doubt.
        named = max((t.ino for t in self._doubts.values()), default=0)
        self._next_ino = max(max(self._nodes) + 1, named + 1, getattr(self, "_next_ino", 0))
        self._maybe_dirty = {ino for ino, n in self._nodes.items() if not n.is_dir}
        self._recount()

    def _attach_cycles(self) -> None:
        """Nodes whose parents lead round in a circle are shown at the root, as a node
        without a parent is: every path ends, none is hidden."""
        reached = {n.ino for n in self.walk(self._nodes[ROOT_INO])}
        for node in sorted(self._nodes.values(), key=lambda n: n.ino):
            if node.ino in reached:
                continue
            self._nodes[node.parent].children.pop(node.name, None)
            self._to_root(node, "is in a cycle of parents")
            reached.update(n.ino for n in self.walk(node))

    def _to_root(self, node: Node, why: str) -> None:
        """Repair of a damaged state.db (no memfs writes one): list node at the root,
        under a name no file there has. Taking a name the root lists would hide that
        file, and the moved node's next save would replace its row (UNIQUE (parent,
        name)); the new name is the file's path from now on, pushed as a rename."""
        root = self._nodes[ROOT_INO]
        name = unique(node.name, set(root.children))
        log.warning("node %d %s; moving it to the root as %r", node.ino, why, name)
        node.parent, node.name = ROOT_INO, name
        root.children[name] = node.ino

    def _root_made(self, root: Node) -> None:
        """A state.db without a root (new): the view shows one; `State` saves it."""

    def close(self) -> None:
        self.db.close()

    # -- meta ----------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        return meta_of(self.db, (key,)).get(key)

    def store_gone(self) -> str | None:
        """"archived" or "deleted": what the last mount learned of its store (None: it
        learned nothing of the kind)."""
        gone = self.get_meta(GONE_KEY)
        return gone if gone in ("archived", "deleted") else None

    def recorded_patterns(self) -> tuple[str, ...] | None:
        """The local-only patterns the mount last ran with (State records them)."""
        try:
            value = json.loads(self.get_meta(LOCAL_ONLY_KEY) or "null")
        except (ValueError, sqlite3.Error):
            return None
        if isinstance(value, list) and all(isinstance(p, str) for p in value):
            return tuple(value)
        return None

    # -- queries -------------------------------------------------------------------

    def path_of(self, node: Node) -> str:
        parts = []
        while node.ino != ROOT_INO:
            parts.append(node.name)
            node = self._nodes[node.parent]
        return "/" + "/".join(reversed(parts))

    def in_tree(self, node: Node) -> bool:
        return self._nodes.get(node.ino) is node

    def lookup_path(self, path: str) -> Node | None:
        node = self._nodes[ROOT_INO]
        if path == "/":
            return node
        for seg in path[1:].split("/"):
            if not node.is_dir:
                return None
            ino = node.children.get(seg)
            if ino is None:
                return None
            node = self._nodes[ino]
        return node

    def child(self, parent: Node, name: str) -> Node | None:
        ino = parent.children.get(name)
        return None if ino is None else self._nodes[ino]

    def holder(self, memory_id: str) -> Node | None:
        """The file that holds memory_id now, if any."""
        ino = self._by_memory.get(memory_id)
        return None if ino is None else self._nodes.get(ino)

    def dirty_files(self) -> list[Node]:
        """The dirty files, from `_maybe_dirty` (pruned as it goes): O(pending), not
        O(store)."""
        out = []
        for ino in list(self._maybe_dirty):
            node = self._nodes.get(ino)
            if node is not None and self.is_dirty(node):
                out.append(node)
            else:
                self._maybe_dirty.discard(ino)
        return out

    def files(self) -> Iterator[Node]:
        return (n for n in self._nodes.values() if not n.is_dir)

    def walk(self, node: Node) -> Iterator[Node]:
        """The node and everything below it."""
        yield node
        for ino in list(node.children.values()):
            yield from self.walk(self._nodes[ino])

    def _use_patterns(self, patterns: Sequence[str]) -> None:
        self.local_only_patterns = tuple(patterns)
        # The same as fnmatchcase over every pattern, as one compiled regex: the
        # pusher asks it for every file of every scan.
        self._local_only_rx = re.compile("|".join(
            f"(?:{fnmatch.translate(p)})" for p in self.local_only_patterns) or "(?!)")

    def is_local_only_name(self, node: Node) -> bool:
        """Editor/tool temp names, matched anywhere in the tree: what a rename to or from
        such a name does (State.rename) and what a new file at one is."""
        return self._local_only_rx.match(node.name) is not None

    def is_local_only(self, node: Node) -> bool:
        """A file that stays in the mount, never a memory: a temp name with no memory.
        A memory another client made at such a name syncs like any other (its edits
        went nowhere before, found by a helper); one renamed to a temp name here has
        left the server's view already (State.rename tombstones it)."""
        return node.memory_id is None and self.is_local_only_name(node)

    def is_refused(self, node: Node) -> bool:
        return node.refused_sha is not None and node.refused_sha == node.sha

    def sync_state(self, node: Node) -> str:
        """One word for `user.memfs.state` and status: where this file stands."""
        if node.is_dir:
            return "directory"
        if self.is_local_only(node):
            return "local-only"
        if self.is_refused(node):
            return "refused"
        if node.memory_id is not None and node.memory_id in self._conflicted:
            return "conflict"
        if self.is_dirty(node):
            return "error" if node.error else "pending"
        return "synced"

    def is_dirty(self, node: Node) -> bool:
        """Local differs from base: the pusher has work for this file."""
        if node.is_dir or self.is_local_only(node):
            return False
        if node.memory_id is None:
            return True
        return node.sha != node.base_sha or self.path_of(node) != node.base_path

    def unsent(self, node: Node) -> str | None:
        """Why the server does not hold this file as the tree shows it, in the words
        `memfs unmount` and adoption use (None: it does, or it is no memory)."""
        if node.sha is None or not self.is_dirty(node):
            return None
        if node.memory_id is None:
            why = "not yet created on the server"
        elif node.sha != node.base_sha:
            why = "edited, not yet pushed"
        else:
            why = f"renamed from {node.base_path}, not yet pushed"
        return why + (f"; refused: {node.refused_reason}" if self.is_refused(node) else "")

    def _counts(self, node: Node) -> bool:
        """Whether a file is (or may become) a memory: counted against the 2,000 cap.
        A refused file counts too (content not UTF-8, too large): an edit makes it a
        memory, and no create checks the cap then. Uncounted, it let a 2,001st memory
        in without ENOSPC, and then `tar x` over a memory unlinked it, got ENOSPC for
        its create, and the delete went out (a helper)."""
        return not (node.is_dir or self.is_local_only(node))

    def memory_count(self) -> int:
        """Files that are (or will be) memories: what counts against the 2,000 cap."""
        return sum(1 for n in self.files() if self._counts(n))

    def _recount(self) -> None:
        self._counted = {ino for ino, n in self._nodes.items() if self._counts(n)}
        self._counted_for = self.local_only_patterns

    def at_capacity(self) -> bool:
        """memory_count() >= MAX_MEMORIES_PER_STORE (see `_count_past`)."""
        return self._count_past(paths.MAX_MEMORIES_PER_STORE - 1)

    def over_capacity(self) -> bool:
        """memory_count() > MAX_MEMORIES_PER_STORE: an atomic save's temp file made at
        the cap (mount/tree.py) is one past it."""
        return self._count_past(paths.MAX_MEMORIES_PER_STORE)

    def _count_past(self, limit: int) -> bool:
        """memory_count() > limit, without a scan of the store unless it is close to
        it. `_counted` holds every counted file (each save adds or drops the saved
        file) and maybe files gone since (a removal leaves its inode), so its size
        bounds the count from above; near the limit it is rebuilt by a scan."""
        if self._counted_for == self.local_only_patterns and len(self._counted) <= limit:
            return False
        self._recount()
        return len(self._counted) > limit

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

    def tree_shas(self) -> dict[str, str]:
        """path -> sha of every file in the tree."""
        return {self.path_of(n): n.sha for n in self.files() if n.sha is not None}
