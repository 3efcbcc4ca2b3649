"""The read side of state.db (memfs/state/view.py): `StateView` and `read_meta` read a
mount's state the way `State` does and never change it; `memfs status` with no daemon
reads through them (memfs/cli/status.py)."""

from __future__ import annotations

import hashlib
import sqlite3
import stat

import pytest
from test_state_transitions import _file

from memfs.cli.status import offline_status
from memfs.core.mountconfig import DEFAULT_LOCAL_ONLY_PATTERNS
from memfs.core.nodes import Remote
from memfs.state.blobs import sha256
from memfs.state.schema import _ADDED, NODE_COLUMNS, SCHEMA_VERSION, create_or_migrate
from memfs.state.state import State
from memfs.state.view import LOCAL_ONLY_KEY, StateUnreadable, StateView, read_meta

PATTERNS = [*DEFAULT_LOCAL_ONLY_PATTERNS, "*.tmp"]


def _files(d) -> dict[str, str]:
    """Every file of the state directory and its content's hash: what a write changes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.iterdir()) if p.is_file()}


def _mount_state(d) -> None:
    """A state.db as a mount with `--local-only '*.tmp'` leaves it: a pushed file, an
    edit, a new file, a rename, a temp file, a pending delete, a conflict, meta."""
    st = State(d / "state.db", local_only_patterns=PATTERNS)
    try:
        root = st.nodes[1]
        sub = st.ensure_dir("/d")
        made = {}
        for parent, name in ((root, "synced.md"), (root, "edited.md"), (sub, "moved.md"),
                             (root, "gone.md"), (root, "new.md"), (root, "scratch.tmp")):
            made[name] = st.new_node(parent, name, is_dir=False, mode=stat.S_IFREG | 0o644,
                                     uid=0, gid=0)
        for i, name in enumerate(("synced.md", "edited.md", "moved.md", "gone.md")):
            node = made[name]
            st.adopt_own_write(node, Remote(f"mem_{i}", st.path_of(node), node.sha))
        st.set_content(made["edited.md"], "e" * 64, 3)
        st.rename(made["moved.md"], root, "moved-here.md", None)
        st.remove(made["gone.md"])
        st.import_conflicts([("/lost.md", None, "c" * 64, None, "server changed it")])
        st.set_meta("mountpoint", "/mnt/x")
        st.set_meta("store_id", "memstore_x")
    finally:
        st.close()


def test_the_view_reads_what_state_reads_and_writes_nothing(tmp_path):
    _mount_state(tmp_path)
    before = _files(tmp_path)
    live = State(tmp_path / "state.db")  # no patterns given: the recorded ones
    view = StateView(tmp_path / "state.db")
    try:
        assert list(view.local_only_patterns) == PATTERNS == list(live.local_only_patterns)
        assert {view.path_of(n): view.sync_state(n) for n in view.files()} == \
            {live.path_of(n): live.sync_state(n) for n in live.files()} == {
                "/synced.md": "synced", "/edited.md": "pending", "/moved-here.md": "pending",
                "/new.md": "pending", "/scratch.tmp": "local-only"}
        assert sorted(view.path_of(n) for n in view.dirty_files()) == \
            ["/edited.md", "/moved-here.md", "/new.md"]
        assert list(view.tombstones) == ["mem_3"] and view.by_memory.keys() == \
            live.by_memory.keys()
        assert view.conflicts() == live.conflicts() and len(view.conflicts()) == 1
        assert view.get_meta("mountpoint") == "/mnt/x"
        assert view.tree_shas() == live.tree_shas()
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            view.db.execute("DELETE FROM nodes")
    finally:
        view.close()
        live.close()
    after = {k: v for k, v in _files(tmp_path).items() if not k.endswith(("-wal", "-shm"))}
    assert after == {k: v for k, v in before.items() if not k.endswith(("-wal", "-shm"))}
    assert read_meta(tmp_path / "state.db", "store_id", "nope") == {"store_id": "memstore_x"}


def test_status_without_a_daemon_uses_the_mounts_local_only_names(tmp_path):
    _mount_state(tmp_path)
    before = _files(tmp_path)
    status = offline_status(tmp_path)
    pending = status["pending"]
    assert [c["path"] for c in pending["creates"]] == ["/new.md"]
    assert [u["path"] for u in pending["updates"]] == ["/edited.md"]
    assert [(r["from"], r["to"]) for r in pending["renames"]] == \
        [("/d/moved.md", "/moved-here.md")]
    assert [d["path"] for d in pending["deletes"]] == ["/gone.md"]
    assert [x["path"] for x in pending["local_only"]] == ["/scratch.tmp"]
    assert [c["path"] for c in status["conflicts"]] == ["/lost.md"]
    assert status["mountpoint"] == "/mnt/x" and status["running"] is False
    assert {k: v for k, v in _files(tmp_path).items() if not k.endswith(("-wal", "-shm"))} \
        == {k: v for k, v in before.items() if not k.endswith(("-wal", "-shm"))}


def test_a_missing_or_broken_state_db_is_one_line_and_stays_as_it_was(tmp_path):
    with pytest.raises(StateUnreadable) as caught:
        StateView(tmp_path / "state.db")
    assert "state.db" in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "state.db").exists()  # a reader never creates one
    assert read_meta(tmp_path / "state.db", "mountpoint") == {}
    (tmp_path / "state.db").write_bytes(b"not a database, " * 100)
    with pytest.raises(StateUnreadable):
        StateView(tmp_path / "state.db")
    assert read_meta(tmp_path / "state.db", "mountpoint") == {}
    assert (tmp_path / "state.db").read_bytes() == b"not a database, " * 100


#: state.db as the first release wrote it: none of the columns added since (schema._ADDED),
#: no parks or doubts table.
OLD_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE nodes (
    ino INTEGER PRIMARY KEY, parent INTEGER NOT NULL, name TEXT NOT NULL,
    is_dir INTEGER NOT NULL, sha TEXT, size INTEGER NOT NULL DEFAULT 0,
    mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL,
    atime_ns INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL,
    memory_id TEXT UNIQUE, base_path TEXT, base_sha TEXT, changed_at REAL,
    sent_sha TEXT, refused_sha TEXT, refused_reason TEXT, UNIQUE (parent, name));
CREATE TABLE tombstones (memory_id TEXT PRIMARY KEY, base_path TEXT NOT NULL,
    base_sha TEXT NOT NULL, deleted_at REAL NOT NULL);
CREATE TABLE conflicts (id INTEGER PRIMARY KEY, path TEXT NOT NULL, memory_id TEXT,
    local_sha TEXT NOT NULL, remote_sha TEXT, reason TEXT NOT NULL, created_at REAL NOT NULL);
"""


def _older_state_db(db, *, base_sha: str) -> sqlite3.Connection:
    """An older memfs's state.db at `db` (no columns added since, no doubts or parks
    table) holding /a.md, memory mem_a, content sha "1"*64 on `base_sha`: the open
    connection, for the rows a test adds."""
    conn = sqlite3.connect(db)
    conn.executescript(OLD_SCHEMA)
    conn.execute("INSERT INTO nodes (ino, parent, name, is_dir, sha, size, mode, uid, gid,"
                 " atime_ns, mtime_ns, ctime_ns, memory_id, base_path, base_sha)"
                 " VALUES (5, 1, 'a.md', 0, ?, 1, ?, 0, 0, 0, 0, 0, 'mem_a', '/a.md', ?)",
                 ("1" * 64, stat.S_IFREG | 0o644, base_sha))
    return conn


def test_an_older_state_db_is_read_as_it_is_not_migrated(tmp_path):
    """An older memfs's state.db (no columns added since, no doubts or parks table), as
    adoption finds one: read with the defaults a migration would give, left unmigrated."""
    db = tmp_path / "state.db"
    conn = _older_state_db(db, base_sha="2" * 64)
    conn.execute("INSERT INTO tombstones (memory_id, base_path, base_sha, deleted_at)"
                 " VALUES ('mem_b', '/b.md', ?, 1.5)", ("3" * 64,))
    conn.commit()
    columns = [r[1] for r in conn.execute("PRAGMA table_info(nodes)")]
    conn.close()
    assert set(columns) == set(NODE_COLUMNS) - {c for t, c, _ in _ADDED if t == "nodes"}
    view = StateView(db)
    try:
        node = view.lookup_path("/a.md")
        assert node is not None and node.gen == 0 and node.error is None
        assert view.is_dirty(node) and view.sync_state(node) == "pending"
        assert view.tombstones["mem_b"].fail_count == 0
        assert view.doubts == {} and view.parks == {}
        assert view.get_meta(LOCAL_ONLY_KEY) is None
        assert tuple(view.local_only_patterns) == tuple(DEFAULT_LOCAL_ONLY_PATTERNS)
    finally:
        view.close()
    conn = sqlite3.connect(db)
    try:
        assert [r[1] for r in conn.execute("PRAGMA table_info(nodes)")] == columns
        assert conn.execute("SELECT count(*) FROM nodes").fetchone() == (1,)  # no root row
    finally:
        conn.close()


def test_state_migrates_an_older_state_db_once(tmp_path):
    """`State` (the daemon, an offline command) opening an older memfs's state.db adds
    the tables and columns it lacks and marks it with the schema's version, keeping its
    rows; every later open finds the version and runs no schema statement at all."""
    db = tmp_path / "state.db"
    conn = _older_state_db(db, base_sha="2" * 64)
    conn.commit()
    conn.close()
    st = State(db)
    try:
        node = st.lookup_path("/a.md")
        assert node is not None and node.memory_id == "mem_a" and node.gen == 0
        assert st.doubts == {} and st.parks == {}
    finally:
        st.close()
    conn = sqlite3.connect(db)
    try:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(nodes)")]
        assert sorted(columns) == sorted(NODE_COLUMNS)
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        create_or_migrate(conn)
        assert statements == ["PRAGMA user_version"]
    finally:
        conn.close()


def _damaged(db, rows) -> None:
    """A state.db of the old schema holding `rows` (ino, parent, name, is_dir) as
    nodes: the shape of damage no memfs writes, to see how a mount reads it."""
    conn = sqlite3.connect(db)
    conn.executescript(OLD_SCHEMA)
    for ino, parent, name, is_dir in rows:
        conn.execute("INSERT INTO nodes (ino, parent, name, is_dir, sha, mode, uid, gid,"
                     " atime_ns, mtime_ns, ctime_ns) VALUES (?, ?, ?, ?, ?, ?, 0, 0, 0, 0, 0)",
                     (ino, parent, name, is_dir, None if is_dir else "1" * 64,
                      (stat.S_IFDIR | 0o755) if is_dir else (stat.S_IFREG | 0o644)))
    conn.commit()
    conn.close()


def _tree(view: StateView) -> dict[str, int]:
    """Every path the view lists from the root, and its inode: what `ls -R` shows."""
    root = view.nodes[1]
    return {view.path_of(n): n.ino for n in view.walk(root) if n is not root}


def test_a_cycle_of_parents_is_shown_at_the_root(tmp_path):
    """A damaged state.db whose parents lead round in a circle: every file still has a
    path (adoption and status end), listed from the root, as a file without a parent has."""
    _damaged(tmp_path / "state.db", ((5, 6, "a", 1), (6, 5, "b", 1), (7, 6, "f.md", 0)))
    view = StateView(tmp_path / "state.db")
    try:
        assert _tree(view) == {"/a": 5, "/a/b": 6, "/a/b/f.md": 7}
        assert view.lookup_path("/a/b/f.md") is view.nodes[7]
        assert [view.path_of(n) for n in view.dirty_files()] == ["/a/b/f.md"]
    finally:
        view.close()


@pytest.mark.parametrize("lost_parent", [8, 9], ids=["parent-missing", "parent-in-a-cycle"])
def test_a_node_moved_to_the_root_never_hides_a_file_of_the_same_name(tmp_path, caplog,
                                                                      lost_parent):
    """The root already lists a file named as the node being moved there (a parent gone
    or in a cycle): the moved node takes a free name, and both files stay listed, each
    at its own path. (Taking the name would hide the root's file, and the next save of
    the moved node would replace its row: UNIQUE (parent, name).)"""
    rows = [(2, 1, "a.md", 0), (3, 1, "d", 1), (4, 3, "x.md", 0),
            (5, lost_parent, "a.md", 0), (6, lost_parent, "d", 1), (7, 6, "y.md", 0),
            (11, 99, "b.md", 0), (12, 1, "b.md", 0)]  # 11 read first: still 12's name
    if lost_parent == 9:
        rows += [(8, 9, "c", 1), (9, 8, "e", 1)]
    _damaged(tmp_path / "state.db", rows)
    with sqlite3.connect(tmp_path / "state.db") as conn:  # 2 and 5: synced memories
        conn.execute("UPDATE nodes SET memory_id = 'mem_' || ino, base_sha = sha,"
                     " base_path = CASE ino WHEN 2 THEN '/a.md' ELSE '/gone/a.md' END"
                     " WHERE ino IN (2, 5)")
    conn.close()
    view = StateView(tmp_path / "state.db")
    try:
        tree = _tree(view)
        assert {ino for ino in tree.values()} == set(view.nodes) - {1}
        assert tree["/a.md"] == 2 and tree["/d/x.md"] == 4 and tree["/b.md"] == 12
        for ino in (5, 6, 7, 11):
            assert view.lookup_path(view.path_of(view.nodes[ino])) is view.nodes[ino]
        assert view.path_of(view.nodes[7]).endswith("/y.md")
        # the moved memory is pushed as a rename to its new path; the root's stays
        assert view.is_dirty(view.nodes[5]) and not view.is_dirty(view.nodes[2])
        # the log is the user's one word of the repair: which node, why, its new name
        why = "has no parent 8" if lost_parent == 8 else "is in a cycle of parents"
        assert f"node 5 {why}; moving it to the root as 'a.md-2'" in caplog.messages
        assert "node 11 has no parent 99; moving it to the root as 'b.md-2'" in caplog.messages
    finally:
        view.close()


def test_a_repaired_node_is_saved_without_replacing_the_roots_file(tmp_path):
    """State saves a node moved to the root where it now is: the file the root already
    listed under that name keeps its row, on this run and the next."""
    _damaged(tmp_path / "state.db", ((2, 1, "a.md", 0), (5, 8, "a.md", 0)))
    st = State(tmp_path / "state.db")
    try:
        st.set_content(st.nodes[5], "2" * 64, 3)
    finally:
        st.close()
    view = StateView(tmp_path / "state.db")
    try:
        tree = _tree(view)
        assert tree["/a.md"] == 2 and set(tree.values()) == {2, 5}
        assert view.nodes[5].sha == "2" * 64
    finally:
        view.close()


# -- view mutants, batch 1 --


def _older_state_db_with_a_conflict(tmp_path):
    """An older memfs's state.db whose /a.md (memory mem_a) has one conflict row, id 1."""
    db = tmp_path / "state.db"
    conn = _older_state_db(db, base_sha="1" * 64)
    conn.execute("INSERT INTO conflicts (path, memory_id, local_sha, reason, created_at)"
                 " VALUES ('/a.md', 'mem_a', ?, 'server changed it', 1.0)", ("2" * 64,))
    conn.commit()
    conn.close()
    return db


def test_an_older_state_dbs_conflict_marks_its_file_as_in_conflict(tmp_path):
    """A conflict row naming a file's memory (state.db of an older memfs, as adoption
    and `memfs status` read it): the view calls that file "conflict", not "synced"."""
    db = _older_state_db_with_a_conflict(tmp_path)
    view = StateView(db)
    try:
        node = view.lookup_path("/a.md")
        assert node is not None and view.sync_state(node) == "conflict"
    finally:
        view.close()


def test_a_new_state_db_has_the_root_row_the_schema_documents(tmp_path):
    """A new mount writes its root as schema.py documents it (ino 1, parent 0, name ''):
    the state.db format other memfs versions and adoption read."""
    State(tmp_path / "state.db").close()
    conn = sqlite3.connect(tmp_path / "state.db")
    try:
        assert conn.execute("SELECT ino, parent, name, is_dir FROM nodes").fetchall() == \
            [(1, 0, "", 1)]
    finally:
        conn.close()

# -- view mutants, batch 2 --


def test_a_new_state_dbs_root_has_all_three_times(tmp_path):
    """A new mount's root directory gets its change time with its access and
    modification times (`stat` on the mountpoint shows no 1970 ctime), saved as such."""
    st = State(tmp_path / "state.db")
    try:
        root = st.nodes[1]
        assert root.ctime_ns == root.mtime_ns == root.atime_ns > 0
    finally:
        st.close()
    view = StateView(tmp_path / "state.db")
    try:
        assert view.nodes[1].ctime_ns == root.ctime_ns
    finally:
        view.close()


def test_an_undone_transaction_does_not_reuse_a_removed_files_inode(tmp_path):
    """After an undone transaction reloads the tree, a new file still gets a fresh inode,
    never the number of a file removed before it (the kernel may still hold that one)."""
    st = State(tmp_path / "state.db")
    try:
        gone = st.new_node(st.nodes[1], "gone.md", is_dir=False,
                           mode=stat.S_IFREG | 0o644, uid=0, gid=0)
        st.remove(gone)
        with pytest.raises(RuntimeError), st.batch():
            raise RuntimeError("undo")
        new = st.new_node(st.nodes[1], "new.md", is_dir=False,
                          mode=stat.S_IFREG | 0o644, uid=0, gid=0)
        assert new.ino > gone.ino
    finally:
        st.close()

# -- view mutants, batch 3 --


def test_a_file_with_two_conflicts_stays_in_conflict_after_a_restart_and_one_discard(tmp_path):
    """Two preserved versions of one memory, read back from state.db by a restarted
    mount: discarding one leaves the file in "conflict" until the other goes too."""
    st = State(tmp_path / "state.db")
    try:
        node = st.new_node(st.nodes[1], "a.md", is_dir=False, mode=stat.S_IFREG | 0o644,
                           uid=0, gid=0)
        st.adopt_own_write(node, Remote("mem_a", "/a.md", node.sha))
        st.import_conflicts([("/a.md", "mem_a", c * 64, None, "lost") for c in "bc"])
    finally:
        st.close()
    st = State(tmp_path / "state.db")  # a restart: the counts come from state.db
    try:
        node = st.lookup_path("/a.md")
        assert node is not None and st.sync_state(node) == "conflict"
        first, second = (c["id"] for c in st.conflicts())
        st.discard_conflict(first)
        assert st.sync_state(node) == "conflict"  # one version is still kept
        st.discard_conflict(second)
        assert st.sync_state(node) == "synced"
    finally:
        st.close()

# -- view mutants, batch 4 --


def test_a_state_db_without_a_root_shows_the_root_as_rwxr_xr_x(tmp_path):
    """A state.db with no root row (an older memfs's, or a new mount's): the view and
    `State` both show the mount's root as a directory of mode 0755, the mode `ls -ld`
    of a fresh mount shows, not some other permission bits."""
    db = tmp_path / "state.db"
    conn = sqlite3.connect(db)
    conn.executescript(OLD_SCHEMA)
    conn.commit()
    conn.close()
    view = StateView(db)
    try:
        root = view.lookup_path("/")
        assert root is not None and stat.S_ISDIR(root.mode)
        assert stat.S_IMODE(root.mode) == 0o755
    finally:
        view.close()
    (tmp_path / "new").mkdir()
    live = State(tmp_path / "new" / "state.db")
    try:
        assert live.nodes[1].mode == stat.S_IFDIR | 0o755
    finally:
        live.close()


def test_a_broken_state_db_says_why_it_cannot_be_read(tmp_path):
    """A state.db that is not a database: the one-line error names the file and SQLite's
    reason, so `memfs status` tells a damaged file from a missing one."""
    db = tmp_path / "state.db"
    db.write_bytes(b"not a database, " * 100)
    with pytest.raises(StateUnreadable) as caught:
        StateView(db)
    message = str(caught.value)
    assert message.startswith(f"cannot read {db}: ") and "not a database" in message


def test_dirty_files_forgets_clean_files_it_has_checked(tmp_path):
    """The pusher's work list stays O(pending): once `dirty_files` has found a file
    clean, a later call does not check it again (a 2,000-file store is not rescanned
    on every pass)."""
    _mount_state(tmp_path)
    view = StateView(tmp_path / "state.db")
    try:
        checked: list[str] = []
        is_dirty = view.is_dirty

        def counting(node):
            checked.append(view.path_of(node))
            return is_dirty(node)

        view.is_dirty = counting
        dirty = sorted(view.path_of(n) for n in view.dirty_files())
        assert "/synced.md" in checked and "/synced.md" not in dirty
        checked.clear()
        assert sorted(view.path_of(n) for n in view.dirty_files()) == dirty
        assert sorted(checked) == dirty
    finally:
        view.close()

# -- view mutants, batch 5 --


def test_tree_shas_maps_every_file_with_content_to_its_sha(tmp_path):
    """Adoption of an earlier state directory skips a conflict whose content is already at
    its path (memfs/state/statedir.py) by `tree_shas()`: every file with content, by path,
    with its sha; no directory, and no file row without a sha (an older memfs's)."""
    _mount_state(tmp_path)
    conn = sqlite3.connect(tmp_path / "state.db")
    conn.execute("INSERT INTO nodes (ino, parent, name, is_dir, sha, mode, uid, gid,"
                 " atime_ns, mtime_ns, ctime_ns) VALUES (99, 1, 'nosha.md', 0, NULL, ?,"
                 " 0, 0, 0, 0, 0)", (stat.S_IFREG | 0o644,))
    conn.commit()
    conn.close()
    empty = hashlib.sha256(b"").hexdigest()
    view = StateView(tmp_path / "state.db")
    try:
        assert view.tree_shas() == {
            "/synced.md": empty, "/edited.md": "e" * 64, "/moved-here.md": empty,
            "/new.md": empty, "/scratch.tmp": empty}
    finally:
        view.close()


def test_a_state_db_of_schema_version_1_gains_what_version_2_added(tmp_path):
    """Version 1 had neither the `sources` and `known` tables nor the tombstones'
    `delete_sent_at`: an offline reader reads it as it is; opening it with `State` adds
    them, so what is noted from then on is kept."""
    db = tmp_path / "state.db"
    State(db).close()
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE sources")
    conn.execute("DROP TABLE known")
    conn.execute("DROP TABLE tombstones")  # as version 1 made it
    conn.execute("CREATE TABLE tombstones (memory_id TEXT PRIMARY KEY, base_path TEXT NOT"
                 " NULL, base_sha TEXT NOT NULL, deleted_at REAL NOT NULL, sent_sha TEXT,"
                 " fail_count INTEGER NOT NULL DEFAULT 0, retry_at REAL, error TEXT)")
    conn.execute("INSERT INTO tombstones (memory_id, base_path, base_sha, deleted_at)"
                 " VALUES ('mem_b', '/b.md', ?, 1.5)", ("3" * 64,))
    conn.execute("PRAGMA user_version=1")
    conn.commit()
    conn.close()
    view = StateView(db)
    try:
        assert view.former_sources == {} and list(view.known) == []
        assert view.tombstones["mem_b"].delete_sent_at is None
    finally:
        view.close()
    st = State(db)
    try:
        st.forget_memory(_file(st, "a.md", b"A", memory_id="mem_a"))
        st.tombstone_sending("mem_b")
    finally:
        st.close()
    again = StateView(db)
    try:
        assert dict(again.former_sources) == {hashlib.sha256(b"A").hexdigest(): "mem_a"}
        assert list(again.known) == ["mem_a"]
        assert again.tombstones["mem_b"].delete_sent_at is not None
    finally:
        again.close()


def test_a_conflict_id_is_never_given_twice_and_an_older_table_moves_over(tmp_path):
    """`memfs conflicts discard N` read off an older listing must not drop another
    file's text: the last id was given again once its conflict was settled (a helper,
    6 December). An older state.db's conflicts keep their ids, and the ids go on."""
    db = _older_state_db_with_a_conflict(tmp_path)
    st = State(db)
    try:
        [old] = st.conflicts()
        assert (old["id"], old["path"], old["local_sha"]) == (1, "/a.md", "2" * 64)
        node = st.lookup_path("/a.md")
        ids = []
        for theirs in (b"t1", b"t2"):
            st.set_content(node, sha256(b"mine" + theirs), 6)
            st.take_remote(node, Remote("mem_a", "/a.md", sha256(theirs), 2), "r",
                           gen=node.gen)
            ids.append(st.conflicts()[-1]["id"])
            st.discard_conflict(ids[-1])  # the newest settled: its id is not given again
        assert ids == [2, 3]
    finally:
        st.close()
    conn = sqlite3.connect(db)
    try:
        made = conn.execute("SELECT sql FROM sqlite_master WHERE name='conflicts'").fetchone()
        assert "AUTOINCREMENT" in made[0]
        assert conn.execute("SELECT name FROM sqlite_master WHERE name='conflicts_before'"
                            ).fetchall() == []
    finally:
        conn.close()
