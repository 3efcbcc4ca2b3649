"""memfs serve on PostgreSQL: several server processes on one database, and the
versioned schema migrations.

The race tests start two `memfs serve` processes on the same database and race
writers through both: every rule that SQLite's single writer gives for free
(one winner per precondition, exact version counts, one memory per path, no
lost update) must hold across processes.
"""

from __future__ import annotations

import hashlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import psycopg
import pytest
from conftest import start_server

from memfs.server.db import PG_MIGRATIONS, PG_SCHEMA_VERSION, Database


def sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


@pytest.fixture
def two(tmp_path, pg_url):
    """Two server processes on one fresh PostgreSQL database, started at the same time
    (the schema is created once, under the migration lock)."""
    out: list = [None, None]
    errors: list = []

    def start(i: int) -> None:
        try:
            out[i] = start_server(tmp_path / f"s{i}", api_key="k", db_url=pg_url)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert not errors, errors
        yield out
    finally:
        for sp in out:
            if sp is not None:
                sp.stop()


def test_two_instances_share_one_database(two):
    a, b = (sp.sdk().beta.memory_stores for sp in two)
    import httpx

    ids = {httpx.get(f"{sp.base_url}/_memfs/health").json()["server_id"] for sp in two}
    assert len(ids) == 1  # one database, one identity
    sid = a.create(name="shared").id
    m = b.memories.create(sid, path="/x.md", content="from b")
    assert a.memories.retrieve(m.id, memory_store_id=sid).content == "from b"
    # Cursors are data in the database: a page from A continues on B.
    for i in range(25):
        (a if i % 2 else b).memories.create(sid, path=f"/p/{i:02d}", content=str(i))
    first = a.memories.list(sid, path_prefix="/p/", limit=10)
    rest = list(b.memories.list(sid, path_prefix="/p/", limit=10, page=first.next_page))
    assert [x.path for x in first.data] + [x.path for x in rest] == \
        [f"/p/{i:02d}" for i in range(25)]


def test_racing_preconditions_across_instances(two):
    clients = [sp.sdk().beta.memory_stores for sp in two]
    sid = clients[0].create(name="race").id
    target = clients[1].memories.create(sid, path="/shared.md", content="v0")
    current = "v0"
    per_instance = 8
    rounds = 6
    for rnd in range(rounds):
        barrier = threading.Barrier(2 * per_instance)
        expected = sha(current)

        def race(t: int, rnd: int = rnd, expected: str = expected,
                 barrier: threading.Barrier = barrier) -> str | None:
            ms = clients[t % 2]
            barrier.wait()
            try:
                ms.memories.update(target.id, memory_store_id=sid, content=f"r{rnd}-t{t}",
                                   precondition={"type": "content_sha256",
                                                 "content_sha256": expected})
                return f"r{rnd}-t{t}"
            except anthropic.ConflictError as e:
                assert e.body["error"]["type"] == "memory_precondition_failed_error"
                return None

        with ThreadPoolExecutor(2 * per_instance) as pool:
            results = list(pool.map(race, range(2 * per_instance)))
        winners = [r for r in results if r is not None]
        assert len(winners) == 1, results
        current = winners[0]
        for ms in clients:
            assert ms.memories.retrieve(target.id, memory_store_id=sid).content == current
    versions = list(clients[0].memory_versions.list(sid, memory_id=target.id, limit=100))
    assert len(versions) == rounds + 1  # exactly one per real change
    assert versions[0].id == clients[1].memories.retrieve(
        target.id, memory_store_id=sid).memory_version_id  # newest version is the head


def test_racing_writers_no_lost_or_duplicated_memory(two):
    clients = [sp.sdk().beta.memory_stores for sp in two]
    sid = clients[0].create(name="writers").id

    # Racing creates of one path through both: exactly one memory, the rest 409 with it.
    barrier = threading.Barrier(16)

    def same_path(t: int) -> tuple[str, str]:
        barrier.wait()
        try:
            return "ok", clients[t % 2].memories.create(sid, path="/one", content=str(t)).id
        except anthropic.ConflictError as e:
            return "conflict", e.body["error"]["conflicting_memory_id"]

    with ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(same_path, range(16)))
    oks = [mid for kind, mid in outcomes if kind == "ok"]
    assert len(oks) == 1 and all(mid == oks[0] for _, mid in outcomes)

    # A parent and a child raced through the two instances: never both.
    barrier2 = threading.Barrier(2)

    def occupy(t: int) -> str:
        barrier2.wait()
        path = "/dir" if t == 0 else "/dir/child"
        try:
            clients[t].memories.create(sid, path=path, content="x")
            return "ok"
        except anthropic.ConflictError:
            return "conflict"

    for _ in range(5):
        with ThreadPoolExecutor(2) as pool:
            got = sorted(pool.map(occupy, range(2)))
        assert got == ["conflict", "ok"]
        for m in clients[0].memories.list(sid, path_prefix="/"):
            if m.path.startswith("/dir"):
                clients[0].memories.delete(m.id, memory_store_id=sid)
        barrier2 = threading.Barrier(2)

    # Unconditional updates of one memory through both: every one is a version, the
    # head is the newest version, nothing lost.
    m = clients[0].memories.create(sid, path="/hot.md", content="start")
    n = 40

    def write(i: int) -> None:
        clients[i % 2].memories.update(m.id, memory_store_id=sid, content=f"w{i}")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(write, range(n)))
    versions = list(clients[1].memory_versions.list(sid, memory_id=m.id, limit=100))
    assert len(versions) == n + 1
    stamps = [v.created_at for v in versions]
    assert stamps == sorted(stamps, reverse=True) and len(set(stamps)) == len(stamps)
    head = clients[0].memories.retrieve(m.id, memory_store_id=sid)
    assert head.memory_version_id == versions[0].id
    full = clients[0].memory_versions.retrieve(versions[0].id, memory_store_id=sid)
    assert full.content == head.content
    assert sorted(v.content_sha256 for v in versions[:-1]) == sorted(sha(f"w{i}")
                                                                      for i in range(n))

    # Many distinct creates through both at once: all there, each exactly once.
    def create(i: int) -> str:
        return clients[i % 2].memories.create(sid, path=f"/many/{i}", content=str(i)).id

    with ThreadPoolExecutor(16) as pool:
        made = list(pool.map(create, range(120)))
    assert len(set(made)) == 120
    listed = [x.id for x in clients[1].memories.list(sid, path_prefix="/many/", limit=100)]
    assert sorted(listed) == sorted(made)
    created = [v for v in clients[0].memory_versions.list(sid, operation="created", limit=100)
               if v.memory_id in set(made)]
    assert len(created) == 120


# ----------------------------------------------------------------------------- migrations


def test_migrations_are_versioned_and_idempotent(pg_url):
    db = Database(pg_url)
    sid = db.create_store(name="s", description="nul \x00 kept")["id"]
    server_id = db.server_id
    db.close()
    db = Database(pg_url)  # reopen: nothing to migrate, same identity, same data
    assert db.server_id == server_id
    assert db.get_store(sid)["description"] == "nul \x00 kept"
    db.close()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM memfs_schema").fetchone()[0] == \
            PG_SCHEMA_VERSION


def test_migration_from_version_1(pg_url):
    """A database left at schema 1 (before `meta`) is upgraded in place."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE memfs_schema (version INTEGER NOT NULL)")
        for stmt in PG_MIGRATIONS[1]:
            conn.execute(stmt)
        conn.execute("INSERT INTO memfs_schema VALUES (1)")
        conn.execute("INSERT INTO stores (id, name, created_at, updated_at) VALUES "
                     "('memstore_old', 'old', '2026-01-01T00:00:00.000000Z', "
                     "'2026-01-01T00:00:00.000000Z')")
    db = Database(pg_url)
    try:
        assert db.get_store("memstore_old")["name"] == "old"
        assert db.server_id
    finally:
        db.close()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM memfs_schema").fetchone()[0] == \
            PG_SCHEMA_VERSION


def test_newer_schema_is_refused(pg_url):
    Database(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE memfs_schema SET version = 999")
    with pytest.raises(RuntimeError, match="schema version 999"):
        Database(pg_url)


def test_survives_dropped_database_connections(tmp_path, pg_url):
    """PostgreSQL restarted or a proxy cut the pooled connections: the next requests
    reconnect instead of failing."""
    sp = start_server(tmp_path, api_key="k", db_url=pg_url)
    try:
        ms = sp.sdk().beta.memory_stores
        sid = ms.create(name="s").id
        for i in range(10):
            ms.memories.create(sid, path=f"/m{i}", content="x")
        dbname = pg_url.rsplit("/", 1)[1]
        admin = pg_url.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            killed = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                                  " WHERE datname = %s", (dbname,)).fetchone()[0]
        assert killed >= 1
        for i in range(10):
            assert ms.memories.create(sid, path=f"/after{i}", content="y").path == f"/after{i}"
        assert len(list(ms.memories.list(sid, limit=100))) == 20
    finally:
        sp.stop()


def test_unreachable_database_is_a_clean_error(tmp_path):
    import subprocess
    import sys

    from conftest import REPO

    r = subprocess.run([sys.executable, "-m", "memfs", "serve", "--db",
                        "postgresql://memfs:secret-pw@127.0.0.1:1/nope"],
                       capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert r.returncode != 0 and r.stdout == ""
    assert "cannot open the database" in r.stderr
    assert "Traceback" not in r.stderr and "secret-pw" not in r.stderr


def test_a_writer_stalled_in_a_transaction_holds_the_others_a_bounded_time(pg_url,
                                                                          monkeypatch):
    """A transaction left open on a store's row (an instance stopped mid-write, here a
    plain connection): another instance's write to that store waits `LOCK_TIMEOUT_MS`,
    then gets 503 (retryable) instead of waiting for good and taking its pool with it;
    PostgreSQL ends the stalled session after `IDLE_IN_TRANSACTION_MS`, and its lock
    with it (found by a helper: every instance froze, health still 200)."""
    from memfs.server.db_common import ApiError
    from memfs.server.db_postgres import _Postgres

    monkeypatch.setattr(_Postgres, "LOCK_TIMEOUT_MS", 300)
    monkeypatch.setattr(_Postgres, "IDLE_IN_TRANSACTION_MS", 1500)
    db = Database(pg_url)
    try:
        sid = db.create_store(name="s")["id"]
        with db._pg._connection() as holder:  # noqa: SLF001 - a stalled writer of our own
            stalled = holder[0]
            stalled.execute("BEGIN")
            stalled.execute("SELECT 1 FROM stores WHERE id = %s FOR UPDATE", (sid,))
            with pytest.raises(ApiError) as refused:
                db.create_memory(sid, path="/a.md", content="x", actor=None)
            assert refused.value.status == 503
            # Said as a busy store, not as a database down (a helper).
            assert refused.value.message.startswith("busy: another request holds"), \
                refused.value.message
            deadline = time.monotonic() + 20
            while True:  # PostgreSQL ends the idle transaction, and the lock goes
                try:
                    db.create_memory(sid, path="/a.md", content="x", actor=None)
                    break
                except ApiError:
                    assert time.monotonic() < deadline, "the stalled lock was never released"
                    time.sleep(0.2)
        assert [m["path"] for m in db.list_memories(sid)["data"]] == ["/a.md"]
        shown = db._pg._connect()  # noqa: SLF001
        try:
            assert shown.execute("SHOW lock_timeout").fetchone()[0] == "300ms"
        finally:
            shown.close()
    finally:
        db.close()


def test_closing_does_not_wait_for_good_on_a_transaction_stuck_in_flight(pg_url,
                                                                        monkeypatch):
    """A stopping server whose request is stuck in the database exits after
    `CLOSE_WAIT` (it stayed alive until the lock was released)."""
    from memfs.server.db_postgres import _Postgres

    monkeypatch.setattr(_Postgres, "CLOSE_WAIT", 0.5)
    db = Database(pg_url)
    entered, release, waited = threading.Event(), threading.Event(), threading.Event()

    def stuck() -> None:
        with db._pg.transaction(write=True):  # noqa: SLF001
            entered.set()
            release.wait(60)
            waited.set()  # before its slot goes back to the pool

    t = threading.Thread(target=stuck)
    t.start()
    try:
        assert entered.wait(10)
        db.close()  # waited for good before: until the transaction ended
        assert not waited.is_set()
    finally:
        release.set()
        t.join(30)


def test_ready_is_503_when_every_connection_is_taken(pg_url):
    """Readiness on PostgreSQL: one query within the wait, else why not (here the pool's
    every connection held, as by requests stuck behind a stalled instance's lock)."""
    import contextlib

    db = Database(pg_url)
    try:
        assert db.ping(1.0) is None
        with contextlib.ExitStack() as held:
            for _ in range(db._pg.POOL_SIZE):  # noqa: SLF001
                held.enter_context(db._pg._connection())  # noqa: SLF001
            assert db.ping(0.2) == "all 8 database connections are busy"
        assert db.ping(1.0) is None
    finally:
        db.close()


def test_a_database_outage_is_logged_once_not_per_request(pg_url, monkeypatch, caplog):
    """Every request of an outage answers 503; the log said nothing of it at the default
    level (a helper). One warning, however many requests."""
    import logging

    from memfs.server.db_common import ApiError
    from memfs.server.db_postgres import _Postgres

    db = Database(pg_url)
    try:
        sid = db.create_store(name="s")["id"]

        def down(self):
            raise psycopg.OperationalError("connection refused")

        monkeypatch.setattr(_Postgres, "_connect", down)
        for conn in db._pg._idle:  # noqa: SLF001 - the pool's connections, gone with it
            conn.close()
        with caplog.at_level(logging.WARNING, logger="memfs.server.db_postgres"):
            for _ in range(5):
                with pytest.raises(ApiError) as refused:
                    db.create_memory(sid, path="/a.md", content="x", actor=None)
                assert refused.value.status == 503
        said = [r.getMessage() for r in caplog.records]
        assert said == ["the database is unavailable (OperationalError): requests answer 503"]
    finally:
        monkeypatch.undo()
        db.close()
