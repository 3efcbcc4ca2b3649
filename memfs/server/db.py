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

import base64
import hashlib
import json
import os
import re
import secrets
import sqlite3
import string
import threading
import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from memfs.paths import (
    MAX_CONTENT_BYTES,
    MAX_MEMORIES_PER_STORE,
    PathError,
    validate_path,
    validate_prefix,
)
from memfs.slug import MOUNT_ROOT, mount_slugs

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
    updated_at   TEXT NOT NULL,                 -- name/description/metadata/archive only
    archived_at  TEXT                           -- NULL while active; set once, never cleared
);
-- Store listing: newest first, id as tiebreak.
CREATE INDEX stores_by_created ON stores (created_at, id);

-- The live memories (the head state). A deleted memory has no row here; its
-- history stays in `versions`.
CREATE TABLE memories (
    id                  TEXT PRIMARY KEY,       -- mem_…, stable across renames
    store_id            TEXT NOT NULL REFERENCES stores (id) ON DELETE CASCADE,
    path                TEXT NOT NULL,          -- validated by memfs.paths; BINARY = byte order
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
# Errors


class ApiError(Exception):
    """An error response: HTTP ``status``, error ``type``, ``message``.

    ``extra`` holds additional fields of the error object (e.g.
    ``conflicting_path``); ``headers`` additional response headers.
    """

    def __init__(
        self,
        status: int,
        type: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.extra = extra
        self.headers = dict(headers or {})

    def error_object(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, **self.extra}


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request_error", message)


def not_found(message: str) -> ApiError:
    return ApiError(404, "not_found_error", message)


_NO_RETRY = {"x-should-retry": "false"}


def precondition_failed(message: str) -> ApiError:
    return ApiError(409, "memory_precondition_failed_error", message, headers=_NO_RETRY)


def path_conflict(message: str, path: str, memory_id: str) -> ApiError:
    return ApiError(
        409,
        "memory_path_conflict_error",
        message,
        headers=_NO_RETRY,
        conflicting_path=path,
        conflicting_memory_id=memory_id,
    )


# --------------------------------------------------------------------------
# Small helpers: ids, timestamps, actors, cursors

_B62 = string.digits + string.ascii_uppercase + string.ascii_lowercase


def new_id(prefix: str) -> str:
    """``prefix`` + "01" + 8 base62 chars of milliseconds + 14 random base62.

    Time-ordered (roughly) like the hosted ids, 24 characters after the prefix.
    """
    t = int(time.time() * 1000)
    stamp = ""
    for _ in range(8):
        t, r = divmod(t, 62)
        stamp = _B62[r] + stamp
    return f"{prefix}01{stamp}{''.join(secrets.choice(_B62) for _ in range(14))}"


_TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


_clock_lock = threading.Lock()
_last_ts: datetime | None = None


def now() -> str:
    """The current time, strictly increasing within this process (1 µs steps).

    Every write happens under the database lock, so timestamp order is commit
    order: listings sorted by ``created_at`` never tie within one server run.
    """
    global _last_ts
    with _clock_lock:
        ts = datetime.now(UTC)
        if _last_ts is not None and ts <= _last_ts:
            ts = _last_ts + timedelta(microseconds=1)
        _last_ts = ts
    return ts.strftime(_TS_FORMAT)


def parse_timestamp(value: str, *, name: str) -> str:
    """Parse an RFC 3339 query value into the canonical stored form (UTC)."""
    try:
        dt = datetime.fromisoformat(value.strip().replace("z", "Z"))
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        # OverflowError: a valid value whose UTC time leaves years 1..9999
        # (0001-01-01T00:00:00+14:00).
        return dt.astimezone(UTC).strftime(_TS_FORMAT)
    except (ValueError, OverflowError):
        raise invalid(f"{name} must be an RFC 3339 timestamp within years 1 to 9999") from None


_ACTOR_ID_FIELD = {
    "api_actor": "api_key_id",
    "session_actor": "session_id",
    "user_actor": "user_id",
    "service_account_actor": "service_account_id",
}


@dataclass(frozen=True)
class Actor:
    """Who performs a write: ``type`` is one of the four actor types."""

    type: str
    id: str

    def to_json(self) -> dict[str, str]:
        return {"type": self.type, _ACTOR_ID_FIELD[self.type]: self.id}

    @staticmethod
    def for_api_key(key: str | None) -> Actor:
        if key is None:
            return Actor("api_actor", "apikey_local")
        return Actor("api_actor", "apikey_" + hashlib.sha256(key.encode()).hexdigest()[:16])


def _actor_json(kind: str | None, ident: str | None) -> dict[str, str] | None:
    if kind is None or ident is None:
        return None
    return Actor(kind, ident).to_json()


def _fingerprint(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def encode_cursor(fingerprint: str, key: list[Any]) -> str:
    raw = json.dumps({"f": fingerprint, "k": key}, separators=(",", ":")).encode()
    return "page_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(page: str | None, fingerprint: str) -> list[Any] | None:
    if page is None:
        return None
    try:
        if not page.startswith("page_"):
            raise ValueError
        body = page[5:]
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        key = data["k"]
        if not isinstance(key, list) or not all(isinstance(k, str) for k in key):
            raise ValueError
        for k in key:
            k.encode("utf-8")  # a forged lone surrogate: UnicodeEncodeError (a ValueError)
            if "\x00" in k:  # no path, id or timestamp holds NUL: forged
                raise ValueError
    except (ValueError, KeyError, TypeError, RecursionError):
        raise invalid("page is not a valid page cursor") from None
    if data.get("f") != fingerprint:
        raise invalid("page cursor was issued for a different query; restart from the first page")
    return key


def _key(key: list[Any] | None, n: int) -> list[Any] | None:
    if key is not None and len(key) != n:
        raise invalid("page is not a valid page cursor")
    return key


_SHA_RE = re.compile(r"^[0-9a-f]{64}$")


def check_sha256(value: object, *, name: str) -> str:
    if not isinstance(value, str) or not _SHA_RE.match(value):
        raise invalid(f"{name} must be 64 lowercase hexadecimal characters")
    return value


def _sha(content: str) -> tuple[str, int]:
    data = content.encode("utf-8")
    return hashlib.sha256(data).hexdigest(), len(data)


def check_content(content: object) -> str:
    if not isinstance(content, str):
        raise invalid("content must be a string")
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        raise invalid("content must be valid UTF-8 (lone surrogate)") from None
    if size > MAX_CONTENT_BYTES:
        raise invalid(f"content is {size} bytes; the maximum is {MAX_CONTENT_BYTES} bytes")
    return content


def check_path(path: object, *, where: str = "path") -> str:
    try:
        return validate_path(path, where=where)
    except PathError as exc:
        raise invalid(exc.message) from None


def _ancestors(path: str) -> list[str]:
    """'/a/b/c' -> ['/a', '/a/b']."""
    parts = path.split("/")[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _prefix_upper(prefix: str) -> str:
    """Exclusive upper bound of all strings starting with ``prefix`` (ends in '/')."""
    return prefix[:-1] + "0"  # '0' is the byte after '/'


# --------------------------------------------------------------------------
# Store field validation


def _has_control(s: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" for ch in s)


def _check_utf8(value: str, name: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(f"{name} must be valid UTF-8 (lone surrogate)") from None


def check_store_name(name: object) -> str:
    if not isinstance(name, str):
        raise invalid("name must be a string")
    if not 1 <= len(name) <= 255:
        raise invalid("name must be 1 to 255 characters long")
    if _has_control(name):
        raise invalid("name must not contain control characters")
    _check_utf8(name, "name")
    return name


def check_description(desc: object) -> str:
    if not isinstance(desc, str):
        raise invalid("description must be a string")
    if len(desc) > 1024:
        raise invalid("description must be at most 1,024 characters long")
    _check_utf8(desc, "description")
    return desc


def _check_metadata_pair(key: object, value: object) -> None:
    if not isinstance(key, str) or not 1 <= len(key) <= 64:
        raise invalid("metadata keys must be 1 to 64 characters long")
    if not isinstance(value, str):
        raise invalid(f"metadata value for {key!r} must be a string")
    if len(value) > 512:
        raise invalid(f"metadata value for {key!r} must be at most 512 characters long")
    _check_utf8(key, "metadata key")
    _check_utf8(value, "metadata value")


def _check_metadata_size(bag: dict[str, str]) -> None:
    if len(bag) > 16:
        raise invalid(f"metadata holds {len(bag)} pairs; the maximum is 16")


def check_metadata(meta: object) -> dict[str, str]:
    if not isinstance(meta, dict):
        raise invalid("metadata must be an object")
    for k, v in meta.items():
        _check_metadata_pair(k, v)
    _check_metadata_size(meta)
    return dict(meta)


def check_limit(limit: int | None, *, full: bool) -> int:
    if limit is None:
        limit = 20
    if not 1 <= limit <= 100:
        raise invalid("limit must be between 1 and 100")
    return min(limit, 20) if full else limit


# --------------------------------------------------------------------------
# JSON renderers


def _store_json(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "type": "memory_store",
        "id": row["id"],
        "name": row["name"],
        "description": row["description"],
        "metadata": json.loads(row["metadata"]),
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "archived_at": row["archived_at"],
    }


def _memory_json(row: sqlite3.Row, full: bool) -> dict[str, Any]:
    return {
        "type": "memory",
        "id": row["id"],
        "memory_store_id": row["store_id"],
        "path": row["path"],
        "content": row["content"] if full else None,
        "content_size_bytes": row["content_size_bytes"],
        "content_sha256": row["content_sha256"],
        "memory_version_id": row["version_id"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def _version_json(row: sqlite3.Row, full: bool) -> dict[str, Any]:
    return {
        "type": "memory_version",
        "id": row["id"],
        "memory_store_id": row["store_id"],
        "memory_id": row["memory_id"],
        "operation": row["operation"],
        "path": row["path"],
        "content": row["content"] if full else None,
        "content_size_bytes": row["content_size_bytes"],
        "content_sha256": row["content_sha256"],
        "created_by": _actor_json(row["actor_type"], row["actor_id"]),
        "created_at": row["created_at"],
        "redacted_at": row["redacted_at"],
        "redacted_by": _actor_json(row["redacted_by_type"], row["redacted_by_id"]),
    }



# --------------------------------------------------------------------------
# Sessions: request checks, rendering, the token grant

MAX_STORES_PER_SESSION = 8
MAX_INSTRUCTIONS = 4096
MAX_INITIAL_EVENTS = 50
#: Live tokens kept per session; issuing one more revokes the oldest.
MAX_TOKENS_PER_SESSION = 16
#: Every session token starts with this, so the server tells it from an API key.
SESSION_TOKEN_PREFIX = "memfs_sesstok_"
_ACCESS = ("read_write", "read_only")
#: What memfs serve puts where the hosted API resolves the agent's model.
UNKNOWN_MODEL = "unknown"


@dataclass(frozen=True)
class SessionGrant:
    """What a session token may touch: its session and the attached stores."""

    session_id: str
    access: dict[str, str]  # memory_store_id → "read_write" | "read_only"

    @property
    def actor(self) -> Actor:
        return Actor("session_actor", self.session_id)


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _check_json_text(value: object, name: str) -> None:
    """Every string inside ``value`` is valid UTF-8 (no lone surrogate)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise invalid(f"{name} must be valid UTF-8 (lone surrogate)") from None


def _id_string(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise invalid(f"{name} must be a non-empty string")
    if len(value) > 256 or _has_control(value):
        raise invalid(f"{name} must be at most 256 characters, without control characters")
    _check_utf8(value, name)
    return value


def _opt_list(value: object, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid(f"{name} must be an array")
    return value


def agent_snapshot(agent: object) -> dict[str, Any]:
    """The session's resolved ``agent``. memfs serve keeps no agents, so the
    snapshot is made from the reference alone: its ``id`` (also the ``name``),
    ``version`` (1 when not given), the overrides of an ``agent_with_overrides``
    reference, and fixed values for the rest (model ``unknown`` unless
    overridden, no tools, a ``service_account`` execution identity)."""
    ref: object = {"type": "agent", "id": agent} if isinstance(agent, str) else agent
    if not isinstance(ref, dict):
        raise invalid("agent must be an agent id or an agent object")
    kind = ref.get("type")
    if kind not in ("agent", "agent_with_overrides"):
        raise invalid("agent.type must be 'agent' or 'agent_with_overrides'")
    allowed = {"type", "id", "version"}
    if kind == "agent_with_overrides":
        allowed |= {"model", "system", "tools", "mcp_servers", "skills"}
    extra = sorted(set(ref) - allowed)
    if extra:
        raise invalid(f"agent.{extra[0]}: Extra inputs are not permitted")
    agent_id = _id_string(ref.get("id"), "agent.id")
    version = ref.get("version")
    if version is None:
        version = 1
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise invalid("agent.version must be an integer of at least 1")
    model = ref.get("model")
    if model is None:
        model = {"id": UNKNOWN_MODEL}
    elif isinstance(model, str):
        model = {"id": model}
    elif not (isinstance(model, dict) and isinstance(model.get("id"), str)):
        raise invalid("agent.model must be a model id or a model config object")
    system = ref.get("system")
    if system is not None and not isinstance(system, str):
        raise invalid("agent.system must be a string")
    snap = {
        "type": "agent",
        "id": agent_id,
        "version": version,
        "name": agent_id,
        "description": None,
        "system": system,
        "model": model,
        "tools": _opt_list(ref.get("tools"), "agent.tools"),
        "skills": _opt_list(ref.get("skills"), "agent.skills"),
        "mcp_servers": _opt_list(ref.get("mcp_servers"), "agent.mcp_servers"),
        "execution_identity": {"type": "service_account"},
        "multiagent": None,
    }
    _check_json_text(snap, "agent")
    return snap


def check_session_resources(resources: object) -> list[tuple[str, str, str | None]]:
    """``resources`` of a session create: ``(memory_store_id, access, instructions)``
    per memory store, in order. Only ``memory_store`` resources are supported."""
    items = _opt_list(resources, "resources")
    if len(items) > MAX_STORES_PER_SESSION:
        raise invalid(f"a session can attach at most {MAX_STORES_PER_SESSION} memory stores;"
                      f" got {len(items)}")
    out: list[tuple[str, str, str | None]] = []
    for i, r in enumerate(items):
        where = f"resources[{i}]"
        if not isinstance(r, dict):
            raise invalid(f"{where} must be an object")
        if r.get("type") != "memory_store":
            raise invalid(f"{where}.type: memfs serve supports only memory_store resources")
        extra = sorted(set(r) - {"type", "memory_store_id", "access", "instructions"})
        if extra:
            raise invalid(f"{where}.{extra[0]}: Extra inputs are not permitted")
        if "memory_store_id" not in r:
            raise invalid(f"{where}.memory_store_id: Field required")
        store_id = _id_string(r["memory_store_id"], f"{where}.memory_store_id")
        access = r.get("access")
        if access is None:
            access = "read_write"
        elif access not in _ACCESS:
            raise invalid(f"{where}.access must be 'read_write' or 'read_only'")
        instructions = r.get("instructions")
        if instructions is not None:
            if not isinstance(instructions, str):
                raise invalid(f"{where}.instructions must be a string")
            if len(instructions) > MAX_INSTRUCTIONS:
                raise invalid(f"{where}.instructions must be at most {MAX_INSTRUCTIONS:,}"
                              " characters long")
            _check_utf8(instructions, f"{where}.instructions")
        if any(store_id == o[0] for o in out):
            raise invalid(f"{where}: memory store {store_id!r} is attached twice")
        out.append((store_id, access, instructions))
    return out


def _session_json(row: Any, resources: list[str]) -> dict[str, Any]:
    body = json.loads(row["body"])
    created = datetime.strptime(row["created_at"], _TS_FORMAT).replace(tzinfo=UTC)
    end = datetime.now(UTC)
    if row["archived_at"] is not None:
        end = datetime.strptime(row["archived_at"], _TS_FORMAT).replace(tzinfo=UTC)
    return {
        "type": "session",
        "id": row["id"],
        "status": "idle",  # nothing runs: a session waits for input forever
        "agent": body["agent"],
        "environment_id": body["environment_id"],
        "title": body["title"],
        "metadata": body["metadata"],
        "resources": [json.loads(r) for r in resources],
        "vault_ids": body["vault_ids"],
        "budget": body["budget"],
        "deployment_id": None,
        "outcome_evaluations": [],
        "stats": {
            "active_seconds": 0.0,
            "duration_seconds": max(0.0, round((end - created).total_seconds(), 6)),
        },
        "usage": {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0},
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "archived_at": row["archived_at"],
    }

# --------------------------------------------------------------------------
# The database


class Database:
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
            parent = os.path.dirname(os.path.abspath(self.path))
            if not os.path.isdir(parent):
                os.makedirs(parent, mode=0o700, exist_ok=True)
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
        if "\x00" in store_id:  # stored ids never hold NUL (and PostgreSQL text cannot)
            raise not_found(f"memory store {store_id!r} not found")
        sql = "SELECT * FROM stores WHERE id = ?"
        if lock and self._pg is not None:
            sql += " FOR UPDATE"
        row = c.execute(sql, (store_id,)).fetchone()
        if row is None:
            raise not_found(f"memory store {store_id!r} not found")
        return row

    def _writable_store(self, c: sqlite3.Connection, store_id: str) -> sqlite3.Row:
        row = self._store_row(c, store_id, lock=True)
        if row["archived_at"] is not None:
            raise invalid(f"memory store {store_id!r} is archived and read-only")
        return row

    @staticmethod
    def _memory_row(c: sqlite3.Connection, store_id: str, memory_id: str) -> sqlite3.Row:
        if "\x00" in memory_id:
            raise not_found(f"memory {memory_id!r} not found in store {store_id!r}")
        row = c.execute(
            "SELECT * FROM memories WHERE id = ? AND store_id = ?", (memory_id, store_id)
        ).fetchone()
        if row is None:
            raise not_found(f"memory {memory_id!r} not found in store {store_id!r}")
        return row

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

    def list_stores(
        self,
        *,
        limit: int | None = None,
        page: str | None = None,
        include_archived: bool = False,
        created_gte: str | None = None,
        created_lte: str | None = None,
    ) -> dict[str, Any]:
        limit = check_limit(limit, full=False)
        fp = _fingerprint("stores", include_archived, created_gte, created_lte)
        after = _key(decode_cursor(page, fp), 2)
        sql = "SELECT * FROM stores WHERE 1 = 1"
        args: list[Any] = []
        if not include_archived:
            sql += " AND archived_at IS NULL"
        if created_gte is not None:
            sql += " AND created_at >= ?"
            args.append(created_gte)
        if created_lte is not None:
            sql += " AND created_at <= ?"
            args.append(created_lte)
        if after is not None:
            sql += " AND (created_at, id) < (?, ?)"
            args += after[:2]
        sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
        args.append(limit + 1)
        with self._txn() as c:
            rows = c.execute(sql, args).fetchall()
        nxt = None
        if len(rows) > limit:
            rows = rows[:limit]
            nxt = encode_cursor(fp, [rows[-1]["created_at"], rows[-1]["id"]])
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
                ts = now()
                c.execute(
                    "UPDATE stores SET archived_at = ?, updated_at = ? WHERE id = ?",
                    (ts, ts, store_id),
                )
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

        Order (reference §4.1): validation (400) → store (404) → archived (400)
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
            self._store_row(c, store_id, lock=True)  # deleting in an archived store is allowed
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
        limit = check_limit(limit, full=full)
        fp = _fingerprint(
            "versions",
            store_id,
            memory_id,
            session_id,
            api_key_id,
            service_account_id,
            operation,
            created_gte,
            created_lte,
        )
        after = _key(decode_cursor(page, fp), 2)
        sql = "SELECT * FROM versions WHERE store_id = ?"
        args: list[Any] = [store_id]
        for col, val in (("memory_id", memory_id), ("operation", operation)):
            if val is not None:
                sql += f" AND {col} = ?"
                args.append(val)
        for kind, val in (
            ("session_actor", session_id),
            ("api_actor", api_key_id),
            ("service_account_actor", service_account_id),
        ):
            if val is not None:
                sql += " AND actor_type = ? AND actor_id = ?"
                args += [kind, val]
        if created_gte is not None:
            sql += " AND created_at >= ?"
            args.append(created_gte)
        if created_lte is not None:
            sql += " AND created_at <= ?"
            args.append(created_lte)
        if after is not None:
            sql += " AND (created_at, id) < (?, ?)"
            args += after[:2]
        sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
        args.append(limit + 1)
        # A filter holding NUL matches nothing (no stored id does; PostgreSQL text
        # cannot even compare it): the answer is the empty page, on both backends.
        unmatchable = any(isinstance(a, str) and "\x00" in a for a in args)
        with self._txn() as c:
            self._store_row(c, store_id)
            rows = [] if unmatchable else c.execute(sql, args).fetchall()
        nxt = None
        if len(rows) > limit:
            rows = rows[:limit]
            nxt = encode_cursor(fp, [rows[-1]["created_at"], rows[-1]["id"]])
        return {"data": [_version_json(r, full) for r in rows], "next_page": nxt}

    @staticmethod
    def _version_row(c: sqlite3.Connection, store_id: str, version_id: str) -> sqlite3.Row:
        if "\x00" in version_id:
            raise not_found(f"memory version {version_id!r} not found in store {store_id!r}")
        row = c.execute(
            "SELECT * FROM versions WHERE id = ? AND store_id = ?", (version_id, store_id)
        ).fetchone()
        if row is None:
            raise not_found(f"memory version {version_id!r} not found in store {store_id!r}")
        return row

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


    # -- sessions ------------------------------------------------------------

    def _session_row(self, c: Any, session_id: str, *, lock: bool = False) -> Any:
        """The session's row; ``lock``: ``FOR UPDATE`` on PostgreSQL (like stores)."""
        if "\x00" in session_id:
            raise not_found(f"session {session_id!r} not found")
        sql = "SELECT * FROM sessions WHERE id = ?"
        if lock and self._pg is not None:
            sql += " FOR UPDATE"
        row = c.execute(sql, (session_id,)).fetchone()
        if row is None:
            raise not_found(f"session {session_id!r} not found")
        return row

    @staticmethod
    def _sessions_json(c: Any, rows: list[Any]) -> list[dict[str, Any]]:
        """Render session rows with their resources (one query for all of them)."""
        if not rows:
            return []
        ids = [r["id"] for r in rows]
        marks = ",".join("?" * len(ids))
        by_session: dict[str, list[str]] = {i: [] for i in ids}
        for r in c.execute(
            f"SELECT session_id, resource FROM session_resources WHERE session_id IN ({marks})"
            " ORDER BY session_id, position",
            ids,
        ).fetchall():
            by_session[r["session_id"]].append(r["resource"])
        return [_session_json(r, by_session[r["id"]]) for r in rows]

    def create_session(
        self,
        *,
        agent: object,
        environment_id: object,
        resources: object = None,
        metadata: object = None,
        title: object = None,
        vault_ids: object = None,
        budget: object = None,
        initial_events: object = None,
    ) -> dict[str, Any]:
        """A session; nothing runs. Memory stores are attached here only: each must
        exist (404) and not be archived (400); ``name`` and ``description`` are
        snapshotted and ``mount_path`` derived (:func:`memfs.slug.mount_slugs`)."""
        snap = agent_snapshot(agent)
        env = _id_string(environment_id, "environment_id")
        attach = check_session_resources(resources)
        metadata = {} if metadata is None else check_metadata(metadata)
        if title is not None:
            if not isinstance(title, str):
                raise invalid("title must be a string")
            _check_utf8(title, "title")
        vaults = _opt_list(vault_ids, "vault_ids")
        if not all(isinstance(v, str) for v in vaults):
            raise invalid("vault_ids must be an array of strings")
        if budget is not None and not isinstance(budget, dict):
            raise invalid("budget must be an object")
        events = _opt_list(initial_events, "initial_events")  # accepted; nothing runs
        if len(events) > MAX_INITIAL_EVENTS:
            raise invalid(f"initial_events holds at most {MAX_INITIAL_EVENTS} events")
        body = {"agent": snap, "environment_id": env, "title": title, "metadata": metadata,
                "vault_ids": vaults, "budget": budget}
        _check_json_text(body, "session")
        sid = new_id("sesn_")
        with self._txn(write=True) as c:
            # Lock the stores in id order (no deadlock between two creates), so none
            # is archived between this check and the commit; report in resource order.
            found: dict[str, Any] = {}
            for store_id in sorted(a[0] for a in attach):
                try:
                    found[store_id] = self._store_row(c, store_id, lock=True)
                except ApiError:
                    pass
            for store_id, _, _ in attach:
                row = found.get(store_id)
                if row is None:
                    raise not_found(f"memory store {store_id!r} not found")
                if row["archived_at"] is not None:
                    raise invalid(f"memory store {store_id!r} is archived; archived stores"
                                  " cannot be attached to new sessions")
            stores = [found[a[0]] for a in attach]
            slugs = mount_slugs([(r["name"], r["id"]) for r in stores])
            ts = now()
            c.execute(
                "INSERT INTO sessions (id, agent_id, body, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (sid, snap["id"], json.dumps(body), ts, ts),
            )
            for pos, ((store_id, access, instructions), row, slug) in enumerate(
                zip(attach, stores, slugs, strict=True)
            ):
                resource = {
                    "type": "memory_store",
                    "memory_store_id": store_id,
                    "access": access,
                    "name": row["name"],
                    "description": row["description"],
                    "instructions": instructions,
                    "mount_path": MOUNT_ROOT + slug,
                }
                c.execute(
                    "INSERT INTO session_resources (session_id, position, memory_store_id,"
                    " access, resource) VALUES (?, ?, ?, ?, ?)",
                    (sid, pos, store_id, access, json.dumps(resource)),
                )
            return self._sessions_json(c, [self._session_row(c, sid)])[0]

    def get_session(self, session_id: str) -> dict[str, Any]:
        with self._txn() as c:
            return self._sessions_json(c, [self._session_row(c, session_id)])[0]

    def list_sessions(
        self,
        *,
        limit: int | None = None,
        page: str | None = None,
        memory_store_id: str | None = None,
        agent_id: str | None = None,
        include_archived: bool = False,
        order: str | None = None,
        created_gt: str | None = None,
        created_gte: str | None = None,
        created_lt: str | None = None,
        created_lte: str | None = None,
    ) -> dict[str, Any]:
        """Newest first (``order=asc``: oldest first), ``id`` as tiebreak."""
        order = order or "desc"
        if order not in ("asc", "desc"):
            raise invalid("order must be 'asc' or 'desc'")
        limit = check_limit(limit, full=False)
        bounds = (("created_at >", created_gt), ("created_at >=", created_gte),
                  ("created_at <", created_lt), ("created_at <=", created_lte))
        fp = _fingerprint("sessions", memory_store_id, agent_id, include_archived, order,
                          *(v for _, v in bounds))
        after = _key(decode_cursor(page, fp), 2)
        sql = "SELECT * FROM sessions WHERE 1 = 1"
        args: list[Any] = []
        if not include_archived:
            sql += " AND archived_at IS NULL"
        if memory_store_id is not None:
            sql += (" AND id IN (SELECT session_id FROM session_resources"
                    " WHERE memory_store_id = ?)")
            args.append(memory_store_id)
        if agent_id is not None:
            sql += " AND agent_id = ?"
            args.append(agent_id)
        for cond, val in bounds:
            if val is not None:
                sql += f" AND {cond} ?"
                args.append(val)
        desc = order == "desc"
        if after is not None:
            sql += " AND (created_at, id) " + ("<" if desc else ">") + " (?, ?)"
            args += after
        sql += " ORDER BY created_at {0}, id {0} LIMIT ?".format("DESC" if desc else "ASC")
        args.append(limit + 1)
        unmatchable = any(isinstance(a, str) and "\x00" in a for a in args)
        with self._txn() as c:
            rows = [] if unmatchable else c.execute(sql, args).fetchall()
            nxt = None
            if len(rows) > limit:
                rows = rows[:limit]
                nxt = encode_cursor(fp, [rows[-1]["created_at"], rows[-1]["id"]])
            return {"data": self._sessions_json(c, rows), "next_page": nxt}

    def archive_session(self, session_id: str) -> dict[str, Any]:
        """One-way and idempotent; the session's tokens stop working."""
        with self._txn(write=True) as c:
            row = self._session_row(c, session_id, lock=True)
            if row["archived_at"] is None:
                ts = now()
                c.execute("UPDATE sessions SET archived_at = ?, updated_at = ? WHERE id = ?",
                          (ts, ts, session_id))
            return self._sessions_json(c, [self._session_row(c, session_id)])[0]

    def delete_session(self, session_id: str) -> dict[str, Any]:
        """The session, its resources and its tokens. Memories it wrote stay, and
        their versions keep naming it."""
        with self._txn(write=True) as c:
            self._session_row(c, session_id, lock=True)
            c.execute("DELETE FROM session_tokens WHERE session_id = ?", (session_id,))
            c.execute("DELETE FROM session_resources WHERE session_id = ?", (session_id,))
            c.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        return {"id": session_id, "type": "session_deleted"}

    def issue_session_token(self, session_id: str) -> str:
        """A fresh token for the session (only its SHA-256 is stored). Every token
        works until the session is archived or deleted; past
        :data:`MAX_TOKENS_PER_SESSION`, issuing one revokes the oldest."""
        token = SESSION_TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._txn(write=True) as c:
            row = self._session_row(c, session_id, lock=True)
            if row["archived_at"] is not None:
                raise invalid(f"session {session_id!r} is archived; it has no tokens")
            c.execute("INSERT INTO session_tokens (token_sha256, session_id, created_at)"
                      " VALUES (?, ?, ?)", (token_sha256(token), session_id, now()))
            c.execute(
                "DELETE FROM session_tokens WHERE session_id = ? AND token_sha256 NOT IN"
                " (SELECT token_sha256 FROM session_tokens WHERE session_id = ?"
                "  ORDER BY created_at DESC LIMIT ?)",
                (session_id, session_id, MAX_TOKENS_PER_SESSION),
            )
        return token

    def session_grant(self, token: str) -> SessionGrant:
        """What ``token`` may touch; 401 when it is unknown (never issued, revoked, or
        its session deleted) or its session is archived."""
        with self._txn() as c:
            row = c.execute(
                "SELECT s.id AS id, s.archived_at AS archived_at FROM session_tokens t"
                " JOIN sessions s ON s.id = t.session_id WHERE t.token_sha256 = ?",
                (token_sha256(token),),
            ).fetchone()
            if row is None:
                raise ApiError(401, "authentication_error", "invalid session token")
            if row["archived_at"] is not None:
                raise ApiError(401, "authentication_error",
                               f"session {row['id']!r} is archived; its tokens no longer work")
            access = {
                r["memory_store_id"]: r["access"]
                for r in c.execute(
                    "SELECT memory_store_id, access FROM session_resources WHERE session_id = ?",
                    (row["id"],),
                ).fetchall()
            }
        return SessionGrant(row["id"], access)

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


# --------------------------------------------------------------------------
# PostgreSQL

#: Versioned migrations for PostgreSQL: version → statements, applied in order in
#: one transaction under an advisory lock (two instances starting at once
#: migrate once). Same tables as :data:`SCHEMA`, with two differences:
#: ``COLLATE "C"`` on every sorted/compared text column (byte order, whatever the
#: database's locale), and ``bytea`` for content and description (PostgreSQL
#: ``text`` cannot hold U+0000). Never edit a released step: add a new one.
PG_MIGRATIONS: dict[int, list[str]] = {
    1: [
        """CREATE TABLE stores (
            id           TEXT COLLATE "C" PRIMARY KEY,
            name         TEXT NOT NULL,
            description  BYTEA NOT NULL DEFAULT ''::bytea,
            metadata     TEXT NOT NULL DEFAULT '{}',
            created_at   TEXT COLLATE "C" NOT NULL,
            updated_at   TEXT NOT NULL,
            archived_at  TEXT
        )""",
        "CREATE INDEX stores_by_created ON stores (created_at, id)",
        """CREATE TABLE memories (
            id                  TEXT COLLATE "C" PRIMARY KEY,
            store_id            TEXT COLLATE "C" NOT NULL
                                REFERENCES stores (id) ON DELETE CASCADE,
            path                TEXT COLLATE "C" NOT NULL,
            content             BYTEA NOT NULL,
            content_sha256      TEXT NOT NULL,
            content_size_bytes  INTEGER NOT NULL,
            version_id          TEXT NOT NULL,
            created_at          TEXT NOT NULL,
            updated_at          TEXT NOT NULL,
            UNIQUE (store_id, path)
        )""",
        """CREATE TABLE versions (
            id                  TEXT COLLATE "C" PRIMARY KEY,
            store_id            TEXT COLLATE "C" NOT NULL
                                REFERENCES stores (id) ON DELETE CASCADE,
            memory_id           TEXT COLLATE "C" NOT NULL,
            operation           TEXT NOT NULL
                                CHECK (operation IN ('created', 'modified', 'deleted')),
            path                TEXT COLLATE "C",
            content             BYTEA,
            content_sha256      TEXT,
            content_size_bytes  INTEGER,
            actor_type          TEXT,
            actor_id            TEXT,
            created_at          TEXT COLLATE "C" NOT NULL,
            redacted_at         TEXT,
            redacted_by_type    TEXT,
            redacted_by_id      TEXT
        )""",
        "CREATE INDEX versions_by_created ON versions (store_id, created_at, id)",
        "CREATE INDEX versions_by_memory ON versions (memory_id)",
    ],
    2: [
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ],
    3: [
        """CREATE TABLE sessions (
            id           TEXT COLLATE "C" PRIMARY KEY,
            agent_id     TEXT COLLATE "C" NOT NULL,
            body         TEXT NOT NULL,
            created_at   TEXT COLLATE "C" NOT NULL,
            updated_at   TEXT NOT NULL,
            archived_at  TEXT
        )""",
        "CREATE INDEX sessions_by_created ON sessions (created_at, id)",
        """CREATE TABLE session_resources (
            session_id       TEXT COLLATE "C" NOT NULL
                             REFERENCES sessions (id) ON DELETE CASCADE,
            position         INTEGER NOT NULL,
            memory_store_id  TEXT COLLATE "C" NOT NULL,
            access           TEXT NOT NULL CHECK (access IN ('read_write', 'read_only')),
            resource         TEXT NOT NULL,
            PRIMARY KEY (session_id, position)
        )""",
        "CREATE INDEX session_resources_by_store"
        " ON session_resources (memory_store_id, session_id)",
        """CREATE TABLE session_tokens (
            token_sha256  TEXT COLLATE "C" PRIMARY KEY,
            session_id    TEXT COLLATE "C" NOT NULL
                          REFERENCES sessions (id) ON DELETE CASCADE,
            created_at    TEXT NOT NULL
        )""",
        "CREATE INDEX session_tokens_by_session ON session_tokens (session_id, created_at)",
    ],
}
PG_SCHEMA_VERSION = max(PG_MIGRATIONS)
_PG_MIGRATION_LOCK = 0x6D656D6673  # pg_advisory_xact_lock key ("memfs")


class _Row(tuple):
    """A result row readable by column name (like sqlite3.Row) and by position."""

    _index: dict[str, int]

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)


def _row_factory(cursor: Any) -> Any:
    names = [c.name for c in cursor.description or ()]
    index = {n: i for i, n in enumerate(names)}

    def make(values: Any) -> _Row:
        row = _Row(v.decode("utf-8") if isinstance(v, bytes) else v for v in values)
        row._index = index
        return row

    return make


class _PgConn:
    """A psycopg connection speaking the SQLite dialect this module writes:
    ``?`` placeholders, rows by column name."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, args: Any = ()) -> Any:
        cur = self.conn.cursor(row_factory=_row_factory)
        cur.execute(sql.replace("?", "%s"), tuple(args))
        return cur


class _Postgres:
    """A bounded pool of autocommit psycopg connections; transactions are explicit
    ``BEGIN … COMMIT`` like the SQLite path."""

    POOL_SIZE = 8

    def __init__(self, url: str) -> None:
        import psycopg  # only the PostgreSQL backend needs it

        self._psycopg = psycopg
        self.url = url
        info = psycopg.conninfo.conninfo_to_dict(url)
        self.display = (f"postgresql://{info.get('user', '')}@{info.get('host', '')}"
                        f":{info.get('port', '')}/{info.get('dbname', '')}")
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.POOL_SIZE)
        self._closed = False

    def _connect(self) -> Any:
        return self._psycopg.connect(self.url, autocommit=True, connect_timeout=10)

    @contextmanager
    def _connection(self) -> Iterator[list[Any]]:
        """A pool slot: ``[conn]`` (the holder lets the caller swap a dead connection).
        Returned to the pool after a clean exit, closed after an error."""
        self._slots.acquire()
        try:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            holder = [conn if conn is not None and not conn.closed else self._connect()]
            ok = False
            try:
                yield holder
                ok = True
            finally:
                conn = holder[0]
                if ok and not conn.closed and not self._closed:
                    with self._lock:
                        self._idle.append(conn)
                else:
                    conn.close()
        finally:
            self._slots.release()

    @contextmanager
    def transaction(self, *, write: bool, api_errors: bool = True) -> Iterator[_PgConn]:
        """One transaction on a pooled connection. A pooled connection that died
        (PostgreSQL restarted, a proxy dropped it) is replaced once before any work;
        a connection failure during the work is 503 ``api_error`` (retryable), or
        psycopg's own error with ``api_errors=False`` (at start, for the operator)."""
        psycopg = self._psycopg
        begin = "BEGIN" if write else "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        try:
            with self._connection() as holder:
                conn = holder[0]
                c = _PgConn(conn)
                try:
                    c.execute(begin)
                except psycopg.OperationalError:
                    conn.close()
                    conn = holder[0] = self._connect()
                    c = _PgConn(conn)
                    c.execute(begin)
                try:
                    yield c
                except BaseException:
                    if not conn.closed:
                        try:
                            c.execute("ROLLBACK")
                        except psycopg.Error:
                            conn.close()  # broken: not returned to the pool
                    raise
                else:
                    c.execute("COMMIT")
        except psycopg.OperationalError:
            if not api_errors:
                raise
            raise ApiError(503, "api_error", "the database is unavailable; retry") from None

    def migrate(self) -> str:
        """Bring the schema to :data:`PG_SCHEMA_VERSION`; returns the server id."""
        with self.transaction(write=True, api_errors=False) as c:
            c.execute("SELECT pg_advisory_xact_lock(?)", (_PG_MIGRATION_LOCK,))
            c.execute("CREATE TABLE IF NOT EXISTS memfs_schema (version INTEGER NOT NULL)")
            row = c.execute("SELECT version FROM memfs_schema").fetchone()
            version = 0 if row is None else row["version"]
            if version > PG_SCHEMA_VERSION:
                raise RuntimeError(f"{self.display}: schema version {version}, this memfs "
                                   f"expects at most {PG_SCHEMA_VERSION}")
            for step in range(version + 1, PG_SCHEMA_VERSION + 1):
                for stmt in PG_MIGRATIONS[step]:
                    c.execute(stmt)
            if row is None:
                c.execute("INSERT INTO memfs_schema (version) VALUES (?)", (PG_SCHEMA_VERSION,))
            elif version != PG_SCHEMA_VERSION:
                c.execute("UPDATE memfs_schema SET version = ?", (PG_SCHEMA_VERSION,))
            c.execute("INSERT INTO meta (key, value) VALUES ('server_id', ?)"
                      " ON CONFLICT DO NOTHING", (secrets.token_hex(12),))
            return c.execute("SELECT value FROM meta WHERE key = 'server_id'").fetchone()["value"]

    def close(self) -> None:
        self._closed = True
        for _ in range(self.POOL_SIZE):  # wait for every transaction in flight
            self._slots.acquire()
        with self._lock:
            for conn in self._idle:
                conn.close()
            self._idle.clear()


def open_database(target: str | os.PathLike[str]) -> Database:
    """A SQLite file path, or a ``postgresql://`` URL (the PostgreSQL backend)."""
    return Database(target)
