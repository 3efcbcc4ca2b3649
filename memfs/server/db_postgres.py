"""The PostgreSQL backend of :class:`memfs.server.db.Database`: its versioned
migrations and a small pool of psycopg connections speaking the SQLite dialect
the database code writes.

Split out of :mod:`memfs.server.db`, which re-exports these names.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from memfs.server.db_common import ApiError

log = logging.getLogger(__name__)

#: An outage is logged at most once this often (every request of it answers 503).
OUTAGE_LOG_EVERY = 10.0

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
    #: How long a request waits for a row lock another instance holds (then 503,
    #: retryable): a writer that stalls mid-transaction (a stopped process, a frozen VM)
    #: must not hold every other instance's writers, and then their pools, for good.
    LOCK_TIMEOUT_MS = 10_000
    #: How long PostgreSQL keeps a session idle inside a transaction before ending it,
    #: and its locks: the stalled writer's own, which no request of its will finish.
    IDLE_IN_TRANSACTION_MS = 30_000
    #: Any one statement (the requests bound what they read: a page, one store).
    STATEMENT_TIMEOUT_MS = 30_000
    #: How long `close` waits for the transactions in flight (then the process exits and
    #: PostgreSQL rolls back what did not commit).
    CLOSE_WAIT = 5.0

    def __init__(self, url: str) -> None:
        import psycopg  # only the PostgreSQL backend needs it

        self._psycopg = psycopg
        #: A connection lost or a request that cannot go on now (a lock not granted in
        #: time, a session PostgreSQL ended for idling in a transaction): retryable.
        self._unavailable = (psycopg.OperationalError,
                             psycopg.errors.IdleInTransactionSessionTimeout)
        self.url = url
        info = psycopg.conninfo.conninfo_to_dict(url)
        self.display = (f"postgresql://{info.get('user', '')}@{info.get('host', '')}"
                        f":{info.get('port', '')}/{info.get('dbname', '')}")
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.POOL_SIZE)
        self._closed = False
        self._outage_logged = -OUTAGE_LOG_EVERY

    def _connect(self) -> Any:
        """A connection with the bounds above, and TCP keepalives (a peer that vanished
        is noticed within a minute, not at the kernel's two hours)."""
        return self._psycopg.connect(
            self.url, autocommit=True, connect_timeout=10, keepalives=1, keepalives_idle=30,
            keepalives_interval=10, keepalives_count=3,
            options=(f"-c lock_timeout={self.LOCK_TIMEOUT_MS}"
                     f" -c idle_in_transaction_session_timeout={self.IDLE_IN_TRANSACTION_MS}"
                     f" -c statement_timeout={self.STATEMENT_TIMEOUT_MS}"))

    @contextmanager
    def _connection(self, wait: float | None = None) -> Iterator[list[Any]]:
        """A pool slot: ``[conn]`` (the holder lets the caller swap a dead connection).
        Returned to the pool after a clean exit, closed after an error. ``wait``: how
        long to wait for a slot (TimeoutError after it; None: as long as it takes)."""
        if not (self._slots.acquire() if wait is None else self._slots.acquire(timeout=wait)):
            raise TimeoutError(f"all {self.POOL_SIZE} database connections are busy")
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
                except self._unavailable:
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
        except self._unavailable as exc:
            if not api_errors:
                raise
            if isinstance(exc, psycopg.errors.LockNotAvailable):  # (a helper: it said
                # "unavailable", as for a database down, of a store another request holds)
                raise ApiError(503, "api_error", "busy: another request holds what this "
                               "one needs past the lock timeout; retry") from None
            if isinstance(exc, psycopg.errors.QueryCanceled):  # the statement timeout
                raise ApiError(503, "api_error", "the request ran past the database's "
                               "statement timeout; retry") from None
            if time.monotonic() - self._outage_logged >= OUTAGE_LOG_EVERY:
                # (an outage left no line in the log at the default level: a helper)
                self._outage_logged = time.monotonic()
                log.warning("the database is unavailable (%s): requests answer 503",
                            type(exc).__name__)
            raise ApiError(503, "api_error", "the database is unavailable; retry") from None

    def migrate(self) -> str:
        """Bring the schema to :data:`PG_SCHEMA_VERSION`; returns the server id."""
        with self.transaction(write=True, api_errors=False) as c:
            # Another instance's migration may take as long as it needs: wait it out.
            c.execute("SET LOCAL lock_timeout = 0")
            c.execute("SET LOCAL statement_timeout = 0")
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

    def ping(self, wait: float) -> str | None:
        """None when one query runs within about `wait` seconds; else why not."""
        try:
            with self._connection(wait) as holder:
                conn = holder[0]
                conn.execute("BEGIN READ ONLY")
                conn.execute(f"SET LOCAL statement_timeout = {max(1, int(wait * 1000))}")
                conn.execute("SELECT 1")
                conn.execute("COMMIT")
        except TimeoutError as exc:
            return str(exc)
        except self._psycopg.Error as exc:
            return f"the database does not answer ({type(exc).__name__})"
        return None

    def close(self) -> None:
        """Close the pool once the transactions in flight end, `CLOSE_WAIT` at most (one
        stuck in the database must not keep a stopping server alive: the docs promise
        it exits)."""
        self._closed = True
        deadline = time.monotonic() + self.CLOSE_WAIT
        for _ in range(self.POOL_SIZE):
            if not self._slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
        with self._lock:
            for conn in self._idle:
                conn.close()
            self._idle.clear()
