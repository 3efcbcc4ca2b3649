"""Where state lives (memfs/state/statedir.py): server identity, state keys, adoption of state
kept under another key (defect 9 of issue 7), the known index (defect 12)."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sqlite3
import stat

import httpx
import pytest
from conftest import start_server

from memfs.core.mountconfig import DEFAULT_LOCAL_ONLY_PATTERNS
from memfs.server.db import SCHEMA, SCHEMA_VERSION, Database, _statements
from memfs.state import statedir
from memfs.state.blobs import BlobCache, sha256
from memfs.state.state import State

STORE = "memstore_01TestTestTestTestTestTest"


# -- the server's identity -----------------------------------------------------------------


def test_server_id_is_made_once_and_survives_restarts_and_ports(tmp_path):
    sp = start_server(tmp_path, api_key="k")
    try:
        r = httpx.get(f"{sp.base_url}/_memfs/health", timeout=5)
        assert r.status_code == 200
        first = r.json()
        assert first["ok"] is True and statedir._ID_RE.match(first["server_id"])
        assert statedir.reported_server_id(sp.base_url) == first["server_id"]
        sp.stop()
        old_url = sp.base_url
        with socket.socket() as holder:  # the old port stays taken: the kernel picks another
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (past TIME_WAIT)
            holder.bind(("127.0.0.1", sp.port))
            holder.listen()
            sp.port = 0  # a new port, as the embedded server gets on every start
            sp.start()
        assert sp.base_url != old_url
        assert statedir.reported_server_id(sp.base_url) == first["server_id"]
    finally:
        sp.stop()
    other = start_server(tmp_path / "other")
    try:
        assert statedir.reported_server_id(other.base_url) != first["server_id"]
    finally:
        other.stop()


def test_schema_v1_database_is_migrated_and_keeps_its_data(tmp_path):
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    for stmt in _statements(SCHEMA):  # v1: no meta table (v2), no sessions (v3)
        if not stmt.startswith("CREATE TABLE meta ") and "session" not in stmt:
            conn.execute(stmt)
    conn.execute("INSERT INTO stores (id, name, created_at, updated_at)"
                  " VALUES ('memstore_x', 'old', '2026-01-01T00:00:00.000000Z',"
                  " '2026-01-01T00:00:00.000000Z')")
    conn.execute("PRAGMA user_version=1")
    conn.commit()
    conn.close()
    db = Database(path)
    sid = db.server_id
    assert db.get_store("memstore_x")["name"] == "old"
    db.close()
    db = Database(path)
    assert db.server_id == sid
    db.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_key_resolution(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    sp = start_server(tmp_path, api_key="k")
    try:
        sid = statedir.reported_server_id(sp.base_url)
        assert statedir.resolve_key(sp.base_url, STORE) == f"srv-{sid}"
        url = sp.base_url
    finally:
        sp.stop()
    # Unreachable, nothing known: the URL slug (as before).
    assert statedir.resolve_key(url, STORE, timeout=0.5) == statedir.server_id(url)
    # Unreachable, but a state dir of this store was last mounted from this URL.
    d = statedir.state_dir_for(url, STORE, key=f"srv-{sid}")
    st = State(d / "state.db")
    st.set_meta("base_url", url)
    st.close()
    assert statedir.resolve_key(url, STORE, timeout=0.5) == f"srv-{sid}"
    # A server without an identity (404, like the hosted API): the URL slug.
    assert statedir.key_for("https://api.example.com", None) == \
        statedir.server_id("https://api.example.com")


# -- adoption ------------------------------------------------------------------------------


def _state(d, files: dict[str, tuple[str, str | None, str | None]], conflicts=()):
    """A state.db in d: files {path: (content, memory_id, base content)}; blobs in objects/."""
    d.mkdir(parents=True, exist_ok=True)
    State(d / "state.db").close()  # the schema and the root
    cache = BlobCache(d / "objects")
    conn = sqlite3.connect(d / "state.db")
    dirs = {"": 1}
    ino = 100
    for path, (content, memory_id, base) in files.items():
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            key = "/".join(parts[:i])
            if key not in dirs:
                ino += 1
                conn.execute("INSERT INTO nodes (ino, parent, name, is_dir, mode, uid, gid,"
                             " atime_ns, mtime_ns, ctime_ns) VALUES (?, ?, ?, 1, ?, 0, 0, 0,0,0)",
                             (ino, dirs["/".join(parts[:i - 1])], parts[i - 1],
                              stat.S_IFDIR | 0o755))
                dirs[key] = ino
        ino += 1
        sha = cache.put(content.encode())
        base_sha = None if base is None else sha256(base.encode())
        conn.execute(
            "INSERT INTO nodes (ino, parent, name, is_dir, sha, size, mode, uid, gid, atime_ns,"
            " mtime_ns, ctime_ns, memory_id, base_path, base_sha)"
            " VALUES (?, ?, ?, 0, ?, ?, ?, 0, 0, 0, 0, 0, ?, ?, ?)",
            (ino, dirs["/".join(parts[:-1])], parts[-1], sha, len(content),
             stat.S_IFREG | 0o644, memory_id, path if memory_id else None, base_sha))
    for path, content, reason in conflicts:
        sha = cache.put(content.encode())
        conn.execute("INSERT INTO conflicts (path, memory_id, local_sha, remote_sha, reason,"
                     " created_at) VALUES (?, NULL, ?, NULL, ?, 0)", (path, sha, reason))
    conn.execute("INSERT INTO meta (key, value) VALUES ('store_id', ?)", (STORE,))
    conn.commit()
    conn.close()


def _conflicts(d) -> list[dict]:
    st = State(d / "state.db")
    try:
        return st.conflicts()
    finally:
        st.close()


def _blob(d, sha: str) -> str:
    data = BlobCache(d / "objects").get(sha)
    assert data is not None, f"blob {sha} missing from {d}"
    return data.decode()


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    r = tmp_path / "cache"
    r.mkdir()
    return r


def test_adopt_moves_state_into_place_when_the_new_key_has_none(root):
    old = root / "127-0-0-1-4242-deadbeef" / STORE
    _state(old, {"/a.md": ("one\n", "mem_a", "one\n"), "/b.md": ("two\n", None, None)})
    (root / "srv-abc" / STORE).mkdir(parents=True)  # e.g. a failed mount left a log
    (root / "srv-abc" / STORE / "daemon.log").write_text("log\n")
    done = statedir.adopt(root, "srv-abc", STORE)
    assert len(done) == 1 and done[0].pending == 1
    assert "adopted 1 pending change(s)" in done[0].message()
    assert not old.exists()
    new = root / "srv-abc" / STORE
    st = State(new / "state.db")
    try:
        node = st.lookup_path("/b.md")
        assert node is not None and node.memory_id is None  # still pending, as it was
        assert st.lookup_path("/a.md").memory_id == "mem_a"
    finally:
        st.close()
    assert _blob(new, sha256(b"two\n")) == "two\n"
    leftovers = [p.name for p in (root / "srv-abc").iterdir() if p.name != STORE]
    assert len(leftovers) == 1 and leftovers[0].startswith(f"{STORE}.empty-")
    assert statedir.adopt(root, "srv-abc", STORE) == []  # nothing twice


def test_adopt_imports_pending_work_as_conflicts_when_both_exist(root):
    old = root / "127-0-0-1-4242-deadbeef" / STORE
    _state(old, {
        "/a.md": ("synced\n", "mem_a", "synced\n"),  # clean: nothing to carry
        "/b.md": ("new file\n", None, None),  # pending create
        "/d/c.md": ("edited\n", "mem_c", "base\n"),  # pending update
        "/.b.md.swp": ("swap\n", None, None),  # editor temp: local-only
        "/same.md": ("same\n", None, None),  # pending, but the new tree has it already
    }, conflicts=[("/x.md", "lost before\n", "server changed it")])
    new = root / "srv-abc" / STORE
    _state(new, {"/a.md": ("synced\n", "mem_a", "synced\n"),
                 "/d/c.md": ("server text\n", "mem_c", "server text\n"),
                 "/same.md": ("same\n", "mem_s", "same\n")})
    done = statedir.adopt(root, "srv-abc", STORE)
    assert len(done) == 1
    result = done[0]
    assert sorted(result.imported) == ["/b.md", "/d/c.md", "/x.md"]
    assert "adopted 3 pending change(s)" in result.message()
    rows = {c["path"]: c for c in _conflicts(new)}
    assert set(rows) == {"/b.md", "/d/c.md", "/x.md"}
    assert _blob(new, rows["/b.md"]["local_sha"]) == "new file\n"
    assert rows["/b.md"]["memory_id"] is None and rows["/b.md"]["remote_sha"] is None
    assert _blob(new, rows["/d/c.md"]["local_sha"]) == "edited\n"
    assert rows["/d/c.md"]["memory_id"] == "mem_c"
    assert rows["/d/c.md"]["remote_sha"] == sha256(b"server text\n")
    assert _blob(new, rows["/x.md"]["local_sha"]) == "lost before\n"
    for row in rows.values():
        assert "127-0-0-1-4242-deadbeef" in row["reason"]
    assert "server changed it" in rows["/x.md"]["reason"]
    # The old directory is kept aside, whole, and never imported twice.
    assert not old.exists() and result.aside is not None and result.aside.exists()
    assert (result.aside / "state.db").exists()
    assert statedir.adopt(root, "srv-abc", STORE) == []
    assert len(_conflicts(new)) == 3
    # The new state's blobs survive the daemon's start-up GC (conflicts reference them).
    st = State(new / "state.db")
    try:
        assert {r["local_sha"] for r in rows.values()} <= st.referenced_shas()
    finally:
        st.close()


def test_adopt_leaves_the_mounts_own_local_only_files_and_reads_without_writing(root):
    """What adoption carries over is what the old mount would have pushed: its
    configured local-only names (recorded in its state.db) stay behind, as the
    default temp names do; the old state.db is read, never written."""
    old = root / "other" / STORE
    _state(old, {"/b.md": ("new\n", None, None), "/scratch.tmp": ("temp\n", None, None),
                 "/.b.md.swp": ("swap\n", None, None)})
    State(old / "state.db", local_only_patterns=[*DEFAULT_LOCAL_ONLY_PATTERNS, "*.tmp"]).close()
    before = (old / "state.db").read_bytes()
    assert statedir._pending_rows(old / "state.db")[0] == [
        {"path": "/b.md", "memory_id": None, "local_sha": sha256(b"new\n"),
         "kind": "not yet created on the server"}]
    assert (old / "state.db").read_bytes() == before
    new = root / "srv-abc" / STORE
    _state(new, {})
    done = statedir.adopt(root, "srv-abc", STORE)
    assert [d.imported for d in done] == [["/b.md"]]
    assert [c["path"] for c in _conflicts(new)] == ["/b.md"]


def test_adopt_skips_state_a_running_daemon_holds(root):
    old = root / "other" / STORE
    _state(old, {"/b.md": ("new\n", None, None)})
    fd = os.open(old / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert statedir.adopt(root, "srv-abc", STORE) == []
        assert (old / "state.db").exists()
    finally:
        os.close(fd)
    assert len(statedir.adopt(root, "srv-abc", STORE)) == 1


def test_adopt_does_not_import_into_a_mounted_target(root):
    old = root / "other" / STORE
    _state(old, {"/b.md": ("new\n", None, None)})
    new = root / "srv-abc" / STORE
    _state(new, {})
    fd = os.open(new / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert statedir.adopt(root, "srv-abc", STORE) == []
    finally:
        os.close(fd)
    assert (old / "state.db").exists() and _conflicts(new) == []


def test_adopt_reports_missing_content_and_keeps_the_old_dir(root):
    old = root / "other" / STORE
    _state(old, {"/b.md": ("gone\n", None, None), "/c.md": ("here\n", None, None)})
    sha = sha256(b"gone\n")
    (old / "objects" / sha[:2] / sha).unlink()
    new = root / "srv-abc" / STORE
    _state(new, {})
    [result] = statedir.adopt(root, "srv-abc", STORE)
    assert result.imported == ["/c.md"] and result.missing == ["/b.md"]
    assert "content missing for 1: /b.md" in result.message()
    assert (result.aside / "state.db").exists()  # still there to inspect by hand


def test_adopt_imports_content_a_crash_left_staged(root):
    """A close stages its content in objects/staged.db; a daemon killed before the blob
    writer made it a file leaves it there. Adoption reads it like a blob file."""
    old = root / "other" / STORE
    _state(old, {"/b.md": ("staged only\n", None, None)})
    sha = sha256(b"staged only\n")
    (old / "objects" / sha[:2] / sha).unlink()
    BlobCache(old / "objects").stage(b"staged only\n")  # not closed, never moved: a crash
    new = root / "srv-abc" / STORE
    _state(new, {})
    [result] = statedir.adopt(root, "srv-abc", STORE)
    assert result.imported == ["/b.md"] and result.missing == []
    [row] = _conflicts(new)
    assert row["local_sha"] == sha and _blob(new, sha) == "staged only\n"


# -- the known index -----------------------------------------------------------------------


def test_known_index(root, tmp_path):
    d = root / "srv-abc" / STORE
    _state(d, {})
    mp = str(tmp_path / "mnt")
    assert statedir.known_state_dir(mp) is None
    statedir.remember(mp, d, STORE, "http://x")
    info = json.loads(statedir.known_file(mp).read_text())
    assert info["state_dir"] == str(d) and info["mountpoint"] == mp
    assert stat.S_IMODE(statedir.known_file(mp).stat().st_mode) == 0o600
    assert statedir.known_state_dir(mp) == d
    # Mounted elsewhere since: the entry no longer names this mountpoint's state.
    conn = sqlite3.connect(d / "state.db")
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('mountpoint', '/elsewhere')")
    conn.commit()
    conn.close()
    assert statedir.known_state_dir(mp) is None
    # The directory moved by an adoption: the entry follows it.
    statedir._repoint_known(d, tmp_path / "moved")
    assert json.loads(statedir.known_file(mp).read_text())["state_dir"] == str(tmp_path / "moved")


def test_a_store_id_names_one_directory_or_none(tmp_path):
    for bad in ("../../evil", "a/b", "..", "", "x y"):
        with pytest.raises(ValueError, match="is not a memory store id"):
            statedir.state_dir_for("http://127.0.0.1:1", bad, str(tmp_path), key="k")
    assert list(tmp_path.iterdir()) == []
    assert statedir.state_dir_for("http://127.0.0.1:1", "memstore_01Ab-c", str(tmp_path),
                                  key="k") == tmp_path / "k" / "memstore_01Ab-c"
