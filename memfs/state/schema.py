"""The canonical schema of a mount's ``state.db``, and its migrations.

Everything the daemon acknowledged to a program is in here; blobs live in
``objects/`` keyed by sha256. ``State`` (memfs/state/state.py, memfs/state/transitions.py)
is the only code that writes these tables.
"""

from __future__ import annotations

import sqlite3

#: The file name of a mount's state database, in its state directory.
STATE_DB = "state.db"

SCHEMA = """
-- Key/value facts about this mount: store_id, base_url, last_sync_at, ...; writer:
-- who it writes as on the server (a version's created_by, with a salted tag of the
-- API key it was learned with, never the key: memfs/sync/common.py); writer_witness:
-- a create or delete of its own (`memfs.sync.common.Witness`), to learn that from (tagged
-- the same way), dropped once read.
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
    gen        INTEGER NOT NULL DEFAULT 0,  -- bumped by every local change (content,
                                            -- place, identity): a push or fetch that
                                            -- started at an older gen settles nothing
    sent_sha   TEXT,                 -- sha sent in a request whose outcome is unknown
    refused_sha TEXT,                -- the server refused this sha (400/413); retry
    refused_reason TEXT,             --   only after the content changes
    fail_count INTEGER NOT NULL DEFAULT 0,  -- consecutive refusals of other kinds
    retry_at   REAL,                 -- (403, 404 store, 422...): this file waits until
    error      TEXT,                 --   retry_at; the rest of the queue moves on
    UNIQUE (parent, name)
);

-- Memories deleted locally whose server delete has not gone out yet
-- (the delete delay). A file re-created at base_path revives the memory.
CREATE TABLE IF NOT EXISTS tombstones (
    memory_id  TEXT PRIMARY KEY,
    base_path  TEXT NOT NULL,
    base_sha   TEXT NOT NULL,
    deleted_at REAL NOT NULL,
    sent_sha   TEXT,                 -- an update of this memory whose answer was lost
    fail_count INTEGER NOT NULL DEFAULT 0,
    retry_at   REAL,
    error      TEXT,
    -- When its DELETE went out (written before it does); NULL again only if the
    -- server refused it. The server may have deleted the memory already, its answer
    -- lost: such a memory is never revived (a new file at its path is a new memory).
    delete_sent_at REAL
);

-- Memories this mount moved (or is moving) to a private park path to break a
-- cycle of renames (a swap). Written before the request goes out, so after a
-- crash or a lost answer the memory is still recognised as ours and moved on
-- to its real path; removed once the memory is seen anywhere else.
CREATE TABLE IF NOT EXISTS parks (
    memory_id  TEXT PRIMARY KEY,
    path       TEXT NOT NULL,
    started_at REAL NOT NULL
);

-- Contents that memories held once and hold no more (changed or deleted since;
-- their versions keep them): where content taken from the server and never read
-- is found once no memory holds it (memfs/sync/fetcher.py, recover), across
-- restarts. A hint, not a promise: the newest few thousand (FORMER_SOURCES_KEPT in
-- memfs/state/transitions.py; by rowid, which each note renews), the oldest dropped.
CREATE TABLE IF NOT EXISTS sources (
    sha        TEXT PRIMARY KEY,
    memory_id  TEXT NOT NULL
);

-- Memory ids this mount has held (the newest few thousand: KNOWN_KEPT in
-- memfs/state/transitions.py). A create whose answer was lost is looked for among the
-- versions created since shortly before it was sent (memfs/sync/doubts.py); a memory
-- found there that this mount knew already is not the one that create made, even
-- once it is gone (deleted since, its creation is still listed).
CREATE TABLE IF NOT EXISTS known (
    memory_id  TEXT PRIMARY KEY,
    -- The newest version of it this mount has seen (an answer's or a listing's
    -- memory_version_id; NULL: none yet). A request sent later is journaled with it
    -- (doubts.after_version): had it been applied, its version is newer.
    version    TEXT
);

-- Requests whose outcome is unknown: the answer never came (a connection reset
-- after the server committed, a proxy timeout, a crash while waiting). A row is
-- written in the transaction that records the request, before it goes out, and
-- deleted in the one that applies its answer. While a row is here nothing more is
-- sent for its file: the pusher and the reconciler first ask the server what
-- happened (the memory, its versions) and apply that as the lost answer
-- (memfs/sync/doubts.py), so a local change made meanwhile (an unlink, a rename,
-- an edit) is applied to whatever the server did.
CREATE TABLE IF NOT EXISTS doubts (
    id           INTEGER PRIMARY KEY,
    ino          INTEGER NOT NULL,   -- the file it was sent for (moved to the file
                                     --   that replaces it by a rename over it); an
                                     --   unlinked file's number stays here, and no
                                     --   new file is given it (StateView._load)
    memory_id    TEXT,               -- NULL: a create
    path         TEXT NOT NULL,      -- the path the request carried (or kept)
    sha          TEXT NOT NULL,      -- the content it left (or kept) the memory with
    base_sha     TEXT,               -- its precondition
    gen          INTEGER NOT NULL,   -- the file's gen when it was sent
    previous_sent TEXT,              -- the file's sent_sha before it
    content_sent INTEGER NOT NULL,   -- it carried content
    path_sent    INTEGER NOT NULL,   -- it carried a path
    sent_at      REAL NOT NULL,      -- wall time it was sent (bounds the versions read)
    after_version TEXT               -- the newest version of the memory seen before it
                                     --   went out (known.version): not this request's
);

-- Local versions that lost to a concurrent server change (or that a restore
-- replaced). The winning version is in the tree; the local one is kept here
-- (blob in objects/) until the user restores or discards it. Never dropped
-- silently. AUTOINCREMENT: an id is never given twice, so `memfs conflicts discard
-- N` read off an older listing cannot drop another file's text (the last id was
-- given again once its conflict was settled: a helper, 6 December).
CREATE TABLE IF NOT EXISTS conflicts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    path        TEXT NOT NULL,       -- path of the file when the conflict happened
    memory_id   TEXT,
    local_sha   TEXT NOT NULL,       -- the preserved local content
    remote_sha  TEXT,                -- the content that won (NULL: deleted)
    reason      TEXT NOT NULL,
    created_at  REAL NOT NULL
);
"""

#: ``objects/staged.db``, beside the blob files (memfs/state/blobs.py). A close writes
#: the user's content here, one row in one commit, rather than as a new file;
#: the blob writer turns each row into a file (fsynced) and only then deletes it.
STAGED_SCHEMA = """
CREATE TABLE IF NOT EXISTS staged (
    sha  TEXT PRIMARY KEY,  -- sha256 of data: the blob file's name to be
    data BLOB NOT NULL
);
"""

#: Columns added after the first release: (table, column, declaration).
_ADDED = (
    ("nodes", "gen", "INTEGER NOT NULL DEFAULT 0"),
    ("nodes", "fail_count", "INTEGER NOT NULL DEFAULT 0"),
    ("nodes", "retry_at", "REAL"),
    ("nodes", "error", "TEXT"),
    ("tombstones", "sent_sha", "TEXT"),
    ("tombstones", "fail_count", "INTEGER NOT NULL DEFAULT 0"),
    ("tombstones", "retry_at", "REAL"),
    ("tombstones", "error", "TEXT"),
    ("tombstones", "delete_sent_at", "REAL"),
    ("known", "version", "TEXT"),
    ("doubts", "after_version", "TEXT"),
)

NODE_COLUMNS = (
    "ino", "parent", "name", "is_dir", "sha", "size", "mode", "uid", "gid",
    "atime_ns", "mtime_ns", "ctime_ns", "memory_id", "base_path", "base_sha",
    "changed_at", "gen", "sent_sha", "refused_sha", "refused_reason",
    "fail_count", "retry_at", "error",
)

TOMBSTONE_COLUMNS = (
    "memory_id", "base_path", "base_sha", "deleted_at", "sent_sha",
    "fail_count", "retry_at", "error", "delete_sent_at",
)

#: A `doubts` row, in `PushTicket` field order (memfs/core/nodes.py).
DOUBT_COLUMNS = (
    "ino", "memory_id", "sha", "path", "base_sha", "gen", "previous_sent",
    "content_sent", "path_sent", "sent_at", "after_version", "id",
)

CONFLICT_COLUMNS = ("id", "path", "memory_id", "local_sha", "remote_sha", "reason", "created_at")


#: The schema's version, kept in ``PRAGMA user_version``: a state.db already at it is
#: opened without re-running the schema (every State open: the daemon's start, each
#: offline command, the interleaving harness's checks after every step). Bump it with
#: every change to SCHEMA or _ADDED; older memfs releases left it at 0 (1: before
#: the sources and known tables and tombstones.delete_sent_at; 2: before known.version
#: and doubts.after_version; 3: before conflicts.id was AUTOINCREMENT).
SCHEMA_VERSION = 4

#: An older conflicts table, moved into one whose ids are never given twice (in one
#: transaction: a crash midway leaves the old table as it was).
_CONFLICTS_AUTOINCREMENT = """
BEGIN IMMEDIATE;
ALTER TABLE conflicts RENAME TO conflicts_before;
CREATE TABLE conflicts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    path        TEXT NOT NULL,
    memory_id   TEXT,
    local_sha   TEXT NOT NULL,
    remote_sha  TEXT,
    reason      TEXT NOT NULL,
    created_at  REAL NOT NULL
);
INSERT INTO conflicts SELECT id, path, memory_id, local_sha, remote_sha, reason, created_at
    FROM conflicts_before;
DROP TABLE conflicts_before;
COMMIT;
"""


def create_or_migrate(db: sqlite3.Connection) -> None:
    """Create the tables, and add the columns an older state.db lacks."""
    if db.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    db.executescript(SCHEMA)
    for table, column, decl in _ADDED:
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if column not in have:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
    made = db.execute("SELECT sql FROM sqlite_master WHERE name='conflicts'").fetchone()[0]
    if "AUTOINCREMENT" not in made.upper():
        db.executescript(_CONFLICTS_AUTOINCREMENT)
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
