"""SQLite storage and every operation of the local Memory Stores server.

Everything here is plain synchronous code: :class:`Database` owns one SQLite
connection and one lock, and each public method is one transaction (all or
nothing). Errors the API would return are raised as :class:`ApiError`, which
already carries the HTTP status, the error ``type`` and any extra fields of the
error object; the HTTP layer (``http.py``) only renders it.

Values that reach these methods have the right JSON *type* (the HTTP layer
checks body shapes); the semantic rules (path rules, content size, store name
and metadata limits, occupancy, preconditions, the 2,000-memory cap) are
enforced here, so the rules hold for any caller.

Ordering and strings: SQLite compares TEXT with the BINARY collation, i.e.
``memcmp`` over UTF-8, which is exactly byte-wise path order; Python compares
``str`` by code point, which is the same order for valid UTF-8. Timestamps are
fixed-width RFC 3339 UTC strings (``2026-08-20T10:00:00.123456Z``), so they sort
lexicographically too.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from memfs.core.paths import (
    MAX_MEMORIES_PER_STORE,
    PathError,
    validate_prefix,
)
from memfs.core.private import make_dirs, own_file
from memfs.server.db_common import (
    _TS_FORMAT,
    NO_RETRY,
    Actor,
    ApiError,
    KeysetPage,
    _ancestors,
    _check_metadata_pair,
    _check_metadata_size,
    _fingerprint,
    _key,
    _memory_json,
    _prefix_upper,
    _sha,
    _store_json,
    _version_json,
    check_content,
    check_description,
    check_limit,
    check_metadata,
    check_path,
    check_sha256,
    check_store_name,
    decode_cursor,
    encode_cursor,
    invalid,
    new_id,
    not_found,
    now,
    parse_timestamp,
    path_conflict,
    precondition_failed,
    row_by_id,
)
from memfs.server.db_postgres import PG_MIGRATIONS, PG_SCHEMA_VERSION, _Postgres
from memfs.server.db_sessions import SESSION_TOKEN_PREFIX, SessionGrant, SessionsMixin

# The storage code lives in four modules: this one (the SQLite schema and
# migrations, Database: core, stores, memories, versions), db_common.py (errors,
# ids, timestamps, actors, cursors, validation, JSON renderers), db_sessions.py
# (sessions, and SessionsMixin, Database's session methods) and db_postgres.py
# (the PostgreSQL backend). Names other modules and the tests import from here,
# re-exported so that ``from memfs.server.db import …`` keeps working:
__all__ = [
    "PG_MIGRATIONS",
    "PG_SCHEMA_VERSION",
    "SCHEMA",
    "SESSION_TOKEN_PREFIX",
    "Actor",
    "ApiError",
    "Database",
    "SessionGrant",
    "_fingerprint",
    "_statements",
    "invalid",
    "not_found",
    "open_database",
    "parse_timestamp",
]


SCHEMA_VERSION = 3

# The schema, as canonical code. Every table is created exactly like this; a
# database with a different ``user_version`` is refused rather than guessed at.
SCHEMA = """
-- One row per memory store. Deleting a store cascades to its memories and
-- versions (PRAGMA foreign_keys=ON on every connection).
CREATE TABLE stores (
    id           TEXT PRIMARY KEY,              -- memstore_…
    name         TEXT NOT NULL,                 -- 1–255 chars, no control chars
    description  TEXT NOT NULL DEFAULT '',      -- ≤1024 chars; '' when unset
    metadata     TEXT NOT NULL DEFAULT '{}',    -- JSON object<string,string>, ≤16 pairs
    created_at   TEXT NOT NULL,                 -- RFC 3339 UTC, fixed width
    updated_at   TEXT NOT NULL,                 -- name/description/metadata/archive
    archived_at  TEXT                           -- NULL while active; set once, never cleared
);
-- Store listing: newest first, id as tiebreak.
CREATE INDEX stores_by_created ON stores (created_at, id);

-- The live memories (the head state). A deleted memory has no row here; its
-- history stays in `versions`.
CREATE TABLE memories (
    id                  TEXT PRIMARY KEY,       -- mem_…, stable across renames
    store_id            TEXT NOT NULL REFERENCES stores (id) ON DELETE CASCADE,
    path                TEXT NOT NULL,          -- checked by memfs.core.paths; BINARY: byte order
    content             TEXT NOT NULL,          -- ≤102,400 UTF-8 bytes
    content_sha256      TEXT NOT NULL,          -- lowercase hex of the UTF-8 bytes
    content_size_bytes  INTEGER NOT NULL,
    version_id          TEXT NOT NULL,          -- memver_… of the head version
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    UNIQUE (store_id, path)                     -- also the index for listing and prefix scans
);

-- One immutable row per real change (created / modified / deleted). Only
-- redaction rewrites a row: it nulls path/content/sha/size and sets redacted_*.
CREATE TABLE versions (
    id                  TEXT PRIMARY KEY,       -- memver_…
    store_id            TEXT NOT NULL REFERENCES stores (id) ON DELETE CASCADE,
    memory_id           TEXT NOT NULL,          -- no FK: outlives the memory
    operation           TEXT NOT NULL CHECK (operation IN ('created', 'modified', 'deleted')),
    path                TEXT,                   -- NULL iff redacted
    content             TEXT,                   -- NULL when deleted or redacted
    content_sha256      TEXT,                   -- NULL when deleted or redacted
    content_size_bytes  INTEGER,                -- NULL when deleted or redacted
    actor_type          TEXT,                   -- api_actor | session_actor | … (created_by)
    actor_id            TEXT,                   -- api_key_id | session_id | …
    created_at          TEXT NOT NULL,
    redacted_at         TEXT,
    redacted_by_type    TEXT,
    redacted_by_id      TEXT
);
-- Version listing: newest first (created_at desc, id desc as tiebreak).
CREATE INDEX versions_by_created ON versions (store_id, created_at, id);
CREATE INDEX versions_by_memory ON versions (memory_id);

-- Facts about this server itself (schema version 2). `server_id`: a random id
-- made once per database (GET /_memfs/health reports it); clients key their
-- local state by it, so it must survive restarts and port changes.
CREATE TABLE meta (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);

-- Sessions (schema version 3). Nothing runs: a session is its create request,
-- echoed. `body` holds what is only echoed (the agent snapshot, environment_id,
-- title, metadata, vault_ids, budget) as ASCII JSON (PostgreSQL-safe).
CREATE TABLE sessions (
    id           TEXT PRIMARY KEY,              -- sesn_…
    agent_id     TEXT NOT NULL,                 -- the agent's id (list filter agent_id)
    body         TEXT NOT NULL,                 -- JSON object, see above
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    archived_at  TEXT                           -- NULL while active; set once, never cleared
);
-- Session listing: newest (or oldest) first, id as tiebreak.
CREATE INDEX sessions_by_created ON sessions (created_at, id);

-- The memory stores attached to a session, fixed at creation. No FK to stores:
-- the snapshot (name, description, mount_path) outlives a deleted store.
CREATE TABLE session_resources (
    session_id       TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    position         INTEGER NOT NULL,          -- resource order, from 0
    memory_store_id  TEXT NOT NULL,
    access           TEXT NOT NULL CHECK (access IN ('read_write', 'read_only')),
    resource         TEXT NOT NULL,             -- the resource object as returned (ASCII JSON)
    PRIMARY KEY (session_id, position)
);
-- The list filter memory_store_id.
CREATE INDEX session_resources_by_store ON session_resources (memory_store_id, session_id);

-- Session tokens (POST /_memfs/sessions/{id}/token): only their SHA-256 is kept.
-- Every token of a session works until the session is archived or deleted.
CREATE TABLE session_tokens (
    token_sha256  TEXT PRIMARY KEY,             -- lowercase hex of the token's UTF-8 bytes
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    created_at    TEXT NOT NULL
);
CREATE INDEX session_tokens_by_session ON session_tokens (session_id, created_at);
"""

#: SQLite upgrades: schema version → the tables it added (their CREATE TABLE and
#: CREATE INDEX statements are taken from SCHEMA, so an upgraded file holds
#: exactly what a new one does).
SQLITE_STEPS: dict[int, tuple[str, ...]] = {
    2: ("meta",),
    3: ("sessions", "session_resources", "session_tokens"),
}

# --------------------------------------------------------------------------
# The database


class Database(SessionsMixin):
    """The store behind `memfs serve`; each public method is one transaction.

    SQLite (a file path): one connection behind one lock, every transaction
    ``BEGIN IMMEDIATE`` — one writer at a time, in commit order.

    PostgreSQL (a ``postgresql://`` URL, :class:`_Postgres`): a small pool of
    connections, so several threads and several server processes work at once.
    A write locks its store's row (``SELECT … FOR UPDATE``) before it reads
    anything it decides on, so the writes to one store are serialized exactly as
    on SQLite: occupancy, preconditions, the cap and one version per change hold
    across processes. Reads run in ``REPEATABLE READ`` snapshots (a listing page
    is consistent). Timestamps of a store's changes strictly increase in commit
    order across processes (:meth:`_ts`).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        target = os.fspath(path)
        self._pg: _Postgres | None = None
        if target.startswith(("postgresql://", "postgres://")):
            self._pg = _Postgres(target)
            self.path = self._pg.display
            self.server_id: str = self._pg.migrate()
            return
        self.path = target
        if self.path != ":memory:":
            make_dirs(os.path.dirname(os.path.abspath(self.path)))
            for own in (self.path, self.path + "-wal", self.path + "-shm"):
                own_file(own)  # one made 0666 by another program: 0600 (SQLite copies it)
            if not os.path.exists(self.path):
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.row_factory = sqlite3.Row
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")  # WAL: durable across a killed process
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute("PRAGMA busy_timeout=5000")
        with self._lock:
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    for stmt in _statements(SCHEMA):
                        self._conn.execute(stmt)
                    self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            elif 1 <= version < SCHEMA_VERSION:  # upgrade in place, one step at a time
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    for step in range(version + 1, SCHEMA_VERSION + 1):
                        for stmt in _statements_for(SCHEMA, SQLITE_STEPS[step]):
                            self._conn.execute(stmt)
                    self._conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            elif version != SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path}: schema version {version}, this memfs expects {SCHEMA_VERSION}"
                )
            # The server's identity: made once, then read back on every start.
            self._conn.execute(
                "INSERT INTO meta (key, value) VALUES ('server_id', ?) ON CONFLICT DO NOTHING",
                (secrets.token_hex(12),),
            )
            self.server_id = self._conn.execute(
                "SELECT value FROM meta WHERE key = 'server_id'"
            ).fetchone()[0]

    @property
    def backend(self) -> str:
        return "sqlite" if self._pg is None else "postgresql"

    def close(self) -> None:
        if self._pg is not None:
            self._pg.close()
            return
        with self._lock:
            self._conn.close()

    @contextmanager
    def _txn(self, *, write: bool = False) -> Iterator[Any]:
        if self._pg is not None:
            with self._pg.transaction(write=write) as c:
                yield c
            return
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                yield c
            except BaseException:
                c.execute("ROLLBACK")
                raise
            else:
                c.execute("COMMIT")

    def ping(self, wait: float) -> str | None:
        """None when one query runs within about `wait` seconds; else why not: what
        ``/_memfs/ready`` answers, for a balancer (a server that takes connections but
        cannot use its database is not ready)."""
        if self._pg is not None:
            return self._pg.ping(wait)
        if not self._lock.acquire(timeout=wait):
            return f"the database is busy: no query within {wait:g} s"
        try:
            self._conn.execute("SELECT 1").fetchone()
        except sqlite3.Error as exc:
            return f"the database cannot be read ({exc})"
        finally:
            self._lock.release()
        return None

    def _blob(self, value: str | None) -> str | bytes | None:
        """A content/description value as stored: PostgreSQL keeps them as UTF-8
        ``bytea`` (its ``text`` cannot hold U+0000, which the API allows)."""
        if self._pg is None or value is None:
            return value
        return value.encode("utf-8")

    def _ts(self, c: Any, store_id: str) -> str:
        """The timestamp of a change in ``store_id`` (the store row is locked). On
        PostgreSQL, later than every version of the store, whatever process wrote
        it, so ``created_at`` order is commit order there too."""
        ts = now()
        if self._pg is not None:
            last = c.execute("SELECT max(created_at) AS m FROM versions WHERE store_id = ?",
                             (store_id,)).fetchone()["m"]
            if last is not None and last >= ts:
                ts = (datetime.strptime(last, _TS_FORMAT).replace(tzinfo=UTC)
                      + timedelta(microseconds=1)).strftime(_TS_FORMAT)
        return ts

    # -- helpers inside a transaction ------------------------------------

    def _store_row(self, c: Any, store_id: str, *, lock: bool = False) -> sqlite3.Row:
        """The store's row. ``lock`` (every write): on PostgreSQL, ``FOR UPDATE``, so
        the writes to one store are serialized across every server process, exactly
        like SQLite's single writer; the transaction's later reads then see every
        write committed before it."""
        return row_by_id(c, "stores", store_id, f"memory store {store_id!r} not found",
                         for_update=lock and self._pg is not None)

    def _writable_store(self, c: sqlite3.Connection, store_id: str) -> sqlite3.Row:
        row = self._store_row(c, store_id, lock=True)
        if row["archived_at"] is not None:
            raise invalid(f"memory store {store_id!r} is archived and read-only")
        return row

    @staticmethod
    def _memory_row(c: sqlite3.Connection, store_id: str, memory_id: str) -> sqlite3.Row:
        return row_by_id(c, "memories", memory_id,
                         f"memory {memory_id!r} not found in store {store_id!r}",
                         store_id=store_id)

    @staticmethod
    def _find_conflict(
        c: sqlite3.Connection, store_id: str, path: str, exclude_id: str | None
    ) -> sqlite3.Row | None:
        """A memory other than ``exclude_id`` at ``path``, an ancestor, or a descendant."""
        candidates = [path, *_ancestors(path)]
        marks = ",".join("?" * len(candidates))
        rows = c.execute(
            f"SELECT id, path FROM memories WHERE store_id = ? AND path IN ({marks})",
            (store_id, *candidates),
        ).fetchall()
        rows = [r for r in rows if r["id"] != exclude_id]
        if rows:
            # The exact path first, then the nearest ancestor.
            rows.sort(key=lambda r: (r["path"] != path, -len(r["path"])))
            return rows[0]
        return c.execute(
            "SELECT id, path FROM memories WHERE store_id = ? AND path >= ? AND path < ?"
            " AND id != ? ORDER BY path LIMIT 1",
            (store_id, path + "/", path + "0", exclude_id or ""),
        ).fetchone()

    def _add_version(
        self,
        c: Any,
        *,
        store_id: str,
        memory_id: str,
        operation: str,
        path: str,
        content: str | None,
        actor: Actor | None,
        ts: str,
    ) -> str:
        vid = new_id("memver_")
        sha, size = _sha(content) if content is not None else (None, None)
        c.execute(
            "INSERT INTO versions (id, store_id, memory_id, operation, path, content,"
            " content_sha256, content_size_bytes, actor_type, actor_id, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                vid,
                store_id,
                memory_id,
                operation,
                path,
                self._blob(content),
                sha,
                size,
                actor.type if actor else None,
                actor.id if actor else None,
                ts,
            ),
        )
        return vid

    # -- stores ------------------------------------------------------------

    def create_store(
        self, *, name: object, description: object = None, metadata: object = None
    ) -> dict[str, Any]:
        name = check_store_name(name)
        description = "" if description is None else check_description(description)
        metadata = {} if metadata is None else check_metadata(metadata)
        sid = new_id("memstore_")
        with self._txn(write=True) as c:
            ts = now()
            c.execute(
                "INSERT INTO stores (id, name, description, metadata, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (sid, name, self._blob(description), json.dumps(metadata), ts, ts),
            )
            return _store_json(self._store_row(c, sid))

    def get_store(self, store_id: str) -> dict[str, Any]:
        with self._txn() as c:
            return _store_json(self._store_row(c, store_id))

    def store_counts(self) -> list[tuple[str, bool, int, int]]:
        """``(store_id, archived, memories, versions)`` of every store, for the
        metrics' per-store gauges (one read at scrape time)."""
        with self._txn() as c:
            rows = c.execute(
                "SELECT s.id AS id, s.archived_at AS archived_at,"
                " (SELECT COUNT(*) FROM memories m WHERE m.store_id = s.id) AS memories,"
                " (SELECT COUNT(*) FROM versions v WHERE v.store_id = s.id) AS versions"
                " FROM stores s ORDER BY s.id").fetchall()
        return [(r["id"], r["archived_at"] is not None, int(r["memories"]), int(r["versions"]))
                for r in rows]

    def list_stores(
        self,
        *,
        limit: int | None = None,
        page: str | None = None,
        include_archived: bool = False,
        created_gte: str | None = None,
        created_lte: str | None = None,
    ) -> dict[str, Any]:
        query = KeysetPage("stores", (include_archived, created_gte, created_lte),
                           limit=limit, page=page)
        if not include_archived:
            query.where("archived_at IS NULL")
        if created_gte is not None:
            query.where("created_at >= ?", created_gte)
        if created_lte is not None:
            query.where("created_at <= ?", created_lte)
        with self._txn() as c:
            rows, nxt = query.fetch(c)
        return {"data": [_store_json(r) for r in rows], "next_page": nxt}

    def update_store(
        self,
        store_id: str,
        *,
        name: object = None,
        description: object = None,
        metadata: object = None,
    ) -> dict[str, Any]:
        """``None`` for a field means "leave unchanged"; ``metadata`` is a patch."""
        if name is not None:
            name = check_store_name(name)
        if description is not None:
            description = check_description(description)
        if metadata is not None:
            if not isinstance(metadata, dict):
                raise invalid("metadata must be an object")
            for k, v in metadata.items():
                if v is not None:
                    _check_metadata_pair(k, v)
                elif not isinstance(k, str) or not 1 <= len(k) <= 64:
                    raise invalid("metadata keys must be 1 to 64 characters long")
        with self._txn(write=True) as c:
            row = self._writable_store(c, store_id)
            new_name = row["name"] if name is None else name
            new_desc = row["description"] if description is None else description
            old_meta = json.loads(row["metadata"])
            new_meta = dict(old_meta)
            if metadata is not None:
                for k, v in metadata.items():
                    if v is None:
                        new_meta.pop(k, None)
                    else:
                        new_meta[k] = v
                _check_metadata_size(new_meta)
            if (new_name, new_desc, new_meta) != (row["name"], row["description"], old_meta):
                c.execute(
                    "UPDATE stores SET name = ?, description = ?, metadata = ?, updated_at = ?"
                    " WHERE id = ?",
                    (new_name, self._blob(new_desc), json.dumps(new_meta), now(), store_id),
                )
            return _store_json(self._store_row(c, store_id))

    def archive_store(self, store_id: str) -> dict[str, Any]:
        with self._txn(write=True) as c:
            row = self._store_row(c, store_id, lock=True)
            if row["archived_at"] is None:
                ts = now()  # archiving moves updated_at too (the SDK's `updated_at`)
                c.execute("UPDATE stores SET archived_at = ?, updated_at = ? WHERE id = ?",
                          (ts, ts, store_id))
            return _store_json(self._store_row(c, store_id))

    def delete_store(self, store_id: str) -> dict[str, Any]:
        with self._txn(write=True) as c:
            self._store_row(c, store_id, lock=True)
            c.execute("DELETE FROM versions WHERE store_id = ?", (store_id,))
            c.execute("DELETE FROM memories WHERE store_id = ?", (store_id,))
            c.execute("DELETE FROM stores WHERE id = ?", (store_id,))
        return {"id": store_id, "type": "memory_store_deleted"}

    # -- memories ------------------------------------------------------------

    def create_memory(
        self,
        store_id: str,
        *,
        path: object,
        content: object,
        actor: Actor | None,
        full: bool = False,
    ) -> dict[str, Any]:
        path = check_path(path)
        if content is None:
            raise invalid('content is required; pass "" to create an empty memory')
        content = check_content(content)
        sha, size = _sha(content)
        with self._txn(write=True) as c:
            self._writable_store(c, store_id)
            conflict = self._find_conflict(c, store_id, path, None)
            if conflict is not None:
                raise _conflict_error(path, conflict)
            count = c.execute(
                "SELECT COUNT(*) AS n FROM memories WHERE store_id = ?", (store_id,)
            ).fetchone()["n"]
            if count >= MAX_MEMORIES_PER_STORE:
                raise invalid(
                    f"memory store {store_id!r} holds its {MAX_MEMORIES_PER_STORE:,}-memory"
                    " maximum; delete a memory before creating another"
                )
            ts = self._ts(c, store_id)
            mid = new_id("mem_")
            vid = self._add_version(
                c,
                store_id=store_id,
                memory_id=mid,
                operation="created",
                path=path,
                content=content,
                actor=actor,
                ts=ts,
            )
            c.execute(
                "INSERT INTO memories (id, store_id, path, content, content_sha256,"
                " content_size_bytes, version_id, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (mid, store_id, path, self._blob(content), sha, size, vid, ts, ts),
            )
            return _memory_json(self._memory_row(c, store_id, mid), full)

    def get_memory(self, store_id: str, memory_id: str, *, full: bool = True) -> dict[str, Any]:
        with self._txn() as c:
            self._store_row(c, store_id)
            return _memory_json(self._memory_row(c, store_id, memory_id), full)

    def list_memories(
        self,
        store_id: str,
        *,
        path_prefix: str | None = None,
        depth: int | None = None,
        limit: int | None = None,
        page: str | None = None,
        full: bool = False,
    ) -> dict[str, Any]:
        prefix = "/" if path_prefix is None else path_prefix
        try:
            validate_prefix(prefix)
        except PathError as exc:
            raise invalid(exc.message) from None
        depth = 0 if depth is None else depth
        if depth not in (0, 1):
            raise invalid("depth must be 0 or 1")
        limit = check_limit(limit, full=full)
        fp = _fingerprint("memories", store_id, prefix, depth)
        after = _key(decode_cursor(page, fp), 1)
        upper = _prefix_upper(prefix)
        items: list[tuple[str, dict[str, Any]]] = []  # (sort key, item)
        with self._txn() as c:
            self._store_row(c, store_id)
            # Position: strictly after the last key handed out. A key ending in
            # '/' is a rolled-up prefix: skip everything below it.
            if after is None:
                lo, inclusive = prefix, True
            elif after[0].endswith("/"):
                lo, inclusive = _prefix_upper(after[0]), True
            else:
                lo, inclusive = after[0], False
            want = limit + 1
            while len(items) < want:
                op = ">=" if inclusive else ">"
                rows = c.execute(
                    f"SELECT * FROM memories WHERE store_id = ? AND path {op} ? AND path < ?"
                    " ORDER BY path LIMIT ?",
                    (store_id, lo, upper, want - len(items)),
                ).fetchall()
                if not rows:
                    break
                rolled = False
                for row in rows:
                    path = row["path"]
                    rest = path[len(prefix) :]
                    if depth == 1 and "/" in rest:
                        sub = prefix + rest.split("/", 1)[0] + "/"
                        items.append((sub, {"type": "memory_prefix", "path": sub}))
                        lo, inclusive = _prefix_upper(sub), True
                        rolled = True
                        break
                    items.append((path, _memory_json(row, full)))
                    lo, inclusive = path, False
                if not rolled and len(rows) < want:
                    break  # fewer rows than asked for: the range is exhausted
        nxt = None
        if len(items) > limit:
            items = items[:limit]
            nxt = encode_cursor(fp, [items[-1][0]])
        return {"data": [item for _, item in items], "next_page": nxt}

    def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        content: object = None,
        path: object = None,
        precondition_sha256: str | None = None,
        actor: Actor | None,
        full: bool = False,
    ) -> dict[str, Any]:
        """``None`` for content/path means "leave unchanged" (at least one required).

        Order (reference 4.1): validation (400) → store (404) → archived (400)
        → memory (404) → no-op (200, no version, even if the precondition
        fails) → precondition (409) → path occupancy (409) → write.
        """
        if content is None and path is None:
            raise invalid("at least one of content or path must be provided")
        if path is not None:
            path = check_path(path)
        if content is not None:
            content = check_content(content)
        if precondition_sha256 is not None:
            check_sha256(precondition_sha256, name="precondition.content_sha256")
        with self._txn(write=True) as c:
            self._writable_store(c, store_id)
            row = self._memory_row(c, store_id, memory_id)
            new_path = row["path"] if path is None else path
            new_content = row["content"] if content is None else content
            if new_path == row["path"] and new_content == row["content"]:
                return _memory_json(row, full)  # no-op: no version
            if precondition_sha256 is not None and precondition_sha256 != row["content_sha256"]:
                raise precondition_failed(
                    f"memory {memory_id!r} has content_sha256 {row['content_sha256']}, not the"
                    f" expected {precondition_sha256}; re-read it and retry"
                )
            if new_path != row["path"]:
                conflict = self._find_conflict(c, store_id, new_path, memory_id)
                if conflict is not None:
                    raise _conflict_error(new_path, conflict)
            ts = self._ts(c, store_id)
            vid = self._add_version(
                c,
                store_id=store_id,
                memory_id=memory_id,
                operation="modified",
                path=new_path,
                content=new_content,
                actor=actor,
                ts=ts,
            )
            sha, size = _sha(new_content)
            c.execute(
                "UPDATE memories SET path = ?, content = ?, content_sha256 = ?,"
                " content_size_bytes = ?, version_id = ?, updated_at = ? WHERE id = ?",
                (new_path, self._blob(new_content), sha, size, vid, ts, memory_id),
            )
            return _memory_json(self._memory_row(c, store_id, memory_id), full)

    def delete_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        expected_content_sha256: str | None = None,
        actor: Actor | None,
    ) -> dict[str, Any]:
        if expected_content_sha256 is not None:
            check_sha256(expected_content_sha256, name="expected_content_sha256")
        with self._txn(write=True) as c:
            # Deleting in an archived store is allowed (the SDK's `archived_at`: "You can
            # still read and delete its memories").
            self._store_row(c, store_id, lock=True)
            row = self._memory_row(c, store_id, memory_id)
            if (
                expected_content_sha256 is not None
                and expected_content_sha256 != row["content_sha256"]
            ):
                raise precondition_failed(
                    f"memory {memory_id!r} has content_sha256 {row['content_sha256']}, not the"
                    f" expected {expected_content_sha256}; nothing was deleted"
                )
            self._add_version(
                c,
                store_id=store_id,
                memory_id=memory_id,
                operation="deleted",
                path=row["path"],
                content=None,
                actor=actor,
                ts=self._ts(c, store_id),
            )
            c.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
        return {"id": memory_id, "type": "memory_deleted"}

    # -- versions ------------------------------------------------------------

    def list_versions(
        self,
        store_id: str,
        *,
        memory_id: str | None = None,
        session_id: str | None = None,
        api_key_id: str | None = None,
        service_account_id: str | None = None,
        operation: str | None = None,
        created_gte: str | None = None,
        created_lte: str | None = None,
        limit: int | None = None,
        page: str | None = None,
        full: bool = False,
    ) -> dict[str, Any]:
        if operation is not None and operation not in ("created", "modified", "deleted"):
            raise invalid("operation must be one of created, modified, deleted")
        query = KeysetPage(
            "versions",
            (store_id, memory_id, session_id, api_key_id, service_account_id, operation,
             created_gte, created_lte),
            limit=limit, page=page, full=full,
        )
        query.where("store_id = ?", store_id)
        for col, val in (("memory_id", memory_id), ("operation", operation)):
            if val is not None:
                query.where(f"{col} = ?", val)
        for kind, val in (
            ("session_actor", session_id),
            ("api_actor", api_key_id),
            ("service_account_actor", service_account_id),
        ):
            if val is not None:
                query.where("actor_type = ? AND actor_id = ?", kind, val)
        if created_gte is not None:
            query.where("created_at >= ?", created_gte)
        if created_lte is not None:
            query.where("created_at <= ?", created_lte)
        with self._txn() as c:
            self._store_row(c, store_id)
            rows, nxt = query.fetch(c)
        return {"data": [_version_json(r, full) for r in rows], "next_page": nxt}

    @staticmethod
    def _version_row(c: sqlite3.Connection, store_id: str, version_id: str) -> sqlite3.Row:
        return row_by_id(c, "versions", version_id,
                         f"memory version {version_id!r} not found in store {store_id!r}",
                         store_id=store_id)

    def get_version(self, store_id: str, version_id: str, *, full: bool = True) -> dict[str, Any]:
        with self._txn() as c:
            self._store_row(c, store_id)
            return _version_json(self._version_row(c, store_id, version_id), full)

    def redact_version(self, store_id: str, version_id: str, *, actor: Actor | None) -> dict:
        with self._txn(write=True) as c:
            self._store_row(c, store_id, lock=True)  # redaction is allowed in archived stores
            row = self._version_row(c, store_id, version_id)
            if row["redacted_at"] is None:
                head = c.execute(
                    "SELECT 1 FROM memories WHERE id = ? AND version_id = ?",
                    (row["memory_id"], version_id),
                ).fetchone()
                if head is not None:
                    raise ApiError(
                        409,
                        "conflict_error",
                        f"memory version {version_id!r} is the current head of memory"
                        f" {row['memory_id']!r}; write a new version or delete the memory first",
                        headers=NO_RETRY,  # the same request gets the same answer
                    )
                c.execute(
                    "UPDATE versions SET path = NULL, content = NULL, content_sha256 = NULL,"
                    " content_size_bytes = NULL, redacted_at = ?, redacted_by_type = ?,"
                    " redacted_by_id = ? WHERE id = ?",
                    (
                        now(),
                        actor.type if actor else None,
                        actor.id if actor else None,
                        version_id,
                    ),
                )
                row = self._version_row(c, store_id, version_id)
            return _version_json(row, False)

def _conflict_error(path: str, conflict: sqlite3.Row) -> ApiError:
    other = conflict["path"]
    if other == path:
        why = f"a memory already exists at {path!r}"
    elif path.startswith(other + "/"):
        why = f"{other!r} is a memory, so {path!r} cannot be below it"
    else:
        why = f"{path!r} is a directory of existing memory {other!r}"
    return path_conflict(f"path conflict: {why}", other, conflict["id"])


def _statements(script: str) -> list[str]:
    """Split the schema into statements (no ';' inside any of them)."""
    lines = [ln.split("--", 1)[0] for ln in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def _statements_for(script: str, tables: tuple[str, ...]) -> list[str]:
    """The CREATE TABLE and CREATE INDEX statements of ``tables`` in ``script``."""
    out = []
    for stmt in _statements(script):
        words = stmt.split()
        # CREATE TABLE name (…) / CREATE INDEX name ON table (…)
        table = words[2] if words[1] == "TABLE" else words[4]
        if table in tables:
            out.append(stmt)
    return out


def open_database(target: str | os.PathLike[str]) -> Database:
    """A SQLite file path, or a ``postgresql://`` URL (the PostgreSQL backend)."""
    return Database(target)
