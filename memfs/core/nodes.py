"""The records `State` keeps: a tree node, a pending delete, a push in flight."""

from __future__ import annotations

from dataclasses import dataclass, field

ROOT_INO = 1
EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

#: The store-root name memfs parks a memory under while a cycle of renames goes
#: out (memfs/sync/pusher.py). No memfs tree shows it and no user may create it.
PARK_NAME = ".memfs-moving"
PARK_DIR = "/" + PARK_NAME


def is_parked(path: str) -> bool:
    return path == PARK_DIR or path.startswith(PARK_DIR + "/")


#: The store-root name of memfs's read-only virtual tree (memfs/mount/versions.py): a
#: memory under it is never shown in a memfs tree and no user may create it.
META_NAME = ".memfs"
META_DIR = "/" + META_NAME


def is_meta(path: str) -> bool:
    return path == META_DIR or path.startswith(META_DIR + "/")


@dataclass(eq=False)
class Node:
    """One file or directory: its place, its local content and its base.

    Identity is ``memory_id``; base is (``base_path``, ``base_sha``): what the
    server held for that memory when we last heard from it. Only `State`
    assigns these fields (open files hold references to nodes, so they are
    updated in place, never replaced)."""

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
    gen: int = 0
    sent_sha: str | None = None
    refused_sha: str | None = None
    refused_reason: str | None = None
    fail_count: int = 0
    retry_at: float | None = None
    error: str | None = None
    children: dict[str, int] = field(default_factory=dict, repr=False)
    #: When the base was last set from a server answer (State.epoch; memory only).
    #: A listing that started before it is older news for this node.
    base_epoch: int = field(default=0, repr=False)
    #: Wall time of the first local change not yet pushed (memory only): bounds how
    #: long a file that never stops changing waits (SyncOptions.max_push_delay).
    dirty_since: float | None = field(default=None, repr=False)


@dataclass(eq=False)
class Tombstone:
    """A memory deleted here whose server delete waits out the delete delay."""

    memory_id: str
    base_path: str
    base_sha: str
    deleted_at: float
    sent_sha: str | None = None
    fail_count: int = 0
    retry_at: float | None = None
    error: str | None = None
    #: When its DELETE went out, while the answer is not known (see the schema).
    delete_sent_at: float | None = None


@dataclass(frozen=True)
class PushTicket:
    """What one create or update sent, kept until its answer comes back.

    The answer is applied to whoever holds the ticket's identity *then*
    (memory id for an update, the node or its rename-over successor for a
    create), never to a node object that may have left the tree meanwhile."""

    ino: int
    memory_id: str | None
    sha: str
    path: str
    base_sha: str | None
    gen: int
    previous_sent: str | None
    content_sent: bool = True  # False: a rename only (the content stays the base)
    path_sent: bool = True     # False: content only (the path stays the base path)
    sent_at: float = 0.0       # wall time it went out
    #: The newest version of its memory this mount had seen when it went out (an
    #: answer's or a listing's `memory_version_id`; None: none seen). The request's
    #: version, had it been applied, is newer: that one and older ones are not it.
    after_version: str | None = None
    doubt: int | None = None   # its row in `doubts` until its answer is applied

    @property
    def written(self) -> tuple[str | None, str]:
        """(path, sha) the memory holds if this request was applied; path None for a
        content-only update, which leaves the memory wherever the server has it (another
        writer may have moved it before or after)."""
        return (self.path if self.path_sent else None,
                self.sha if self.content_sent else (self.base_sha or self.sha))


@dataclass(frozen=True)
class Remote:
    """What the server said about one memory (a response, a listing row, a GET)."""

    id: str
    path: str
    sha: str
    size: int = 0
    version: str | None = None  # its `memory_version_id`, where the answer carried one
