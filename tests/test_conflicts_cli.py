"""`memfs conflicts`: list (text and --json), restore and discard, through a
running daemon and on state.db with no daemon running."""

from __future__ import annotations

import json

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from mountutil import mounts, needs_fuse, server_memories  # noqa: F401
from synchelpers import (
    cat,
    conflicts,
    flush,
    sdk_by_path,
    sdk_create,
    sdk_update,
    wait_for,
    xattr,
)

pytestmark = needs_fuse


def make_conflict(mounts, server, path="/notes/a.md", *, mine="mine\n", theirs="theirs\n"):
    store = mounts.new_store()
    mid = sdk_create(server, store, path, "base\n").id
    m = mounts.mount(store, "--write-back-delay", "30")
    f = m.path / path.lstrip("/")
    wait_for(lambda: cat(f) == "base\n", what="seeded file")
    f.write_text(mine)
    sdk_update(server, store, mid, content=theirs)
    m.sync_now()
    wait_for(lambda: cat(f) == theirs, what="server version")
    return store, mid, m, f


def test_list_text_and_json(mounts, server):
    store, mid, m, f = make_conflict(mounts, server)
    out = m.memfs("conflicts", str(m.path)).stdout
    assert "#1 /notes/a.md" in out
    assert "changed on the server and here" in out
    assert "--- /notes/a.md (server" in out and "+++ /notes/a.md (yours, conflict #1)" in out
    assert "-theirs" in out and "+mine" in out
    [row] = conflicts(m)
    assert row["id"] == 1 and row["memory_id"] == mid
    assert len(row["local_sha"]) == 64 and len(row["remote_sha"]) == 64
    assert row["created_at"] > 0 and row["mountpoint"] == str(m.path)
    # Without a MOUNTPOINT: every running mount.
    assert [r["id"] for r in __import__("json").loads(
        m.memfs("conflicts", "--json").stdout)] == [1]
    # Reported by status too.
    assert "#1 /notes/a.md" in m.memfs("status", str(m.path)).stdout


def test_restore_through_daemon_pushes_over_current_base(mounts, server):
    store, mid, m, f = make_conflict(mounts, server)
    out = m.memfs("conflicts", "restore", "1").stdout  # the one mount that has #1
    assert "restored conflict #1" in out
    wait_for(lambda: cat(f) == "mine\n", what="restored")
    assert xattr(f) == "pending"
    assert [u["path"] for u in m.status()["pending"]["updates"]] == ["/notes/a.md"]
    flush(m)
    assert server_memories(server, store) == {"/notes/a.md": "mine\n"}
    assert conflicts(m) == []
    assert xattr(f) == "synced"


def test_restore_and_discard_without_daemon(mounts, server):
    store = mounts.new_store()
    ids = {p: sdk_create(server, store, p, "base\n").id for p in ("/a.md", "/b.md")}
    m = mounts.mount(store, "--write-back-delay", "30")
    wait_for(lambda: cat(m.path / "b.md") == "base\n", what="seeded")
    (m.path / "a.md").write_text("mine a\n")
    (m.path / "b.md").write_text("mine b\n")
    for p, mid in ids.items():
        sdk_update(server, store, mid, content=f"theirs {p}\n")
    m.sync_now()
    rows = {r["path"]: r["id"] for r in conflicts(m)}
    assert set(rows) == {"/a.md", "/b.md"}
    out = m.unmount(kept=True)  # exit status 3, each conflict named
    assert all(f"#{rows[p]} {p}: changed on the server and here" in out for p in rows), out

    # No daemon: list / restore / discard work on state.db.
    offline_rows = conflicts(m)
    assert {r["path"] for r in offline_rows} == {"/a.md", "/b.md"}
    assert all(r["local_content"].startswith("mine") for r in offline_rows)
    st = m.status()
    assert st["running"] is False and len(st["conflicts"]) == 2
    m.memfs("conflicts", "restore", str(rows["/a.md"]), "--mountpoint", str(m.path))
    m.memfs("conflicts", "discard", str(rows["/b.md"]), "--mountpoint", str(m.path))
    assert conflicts(m) == []
    st = m.status()
    assert [u["path"] for u in st["pending"]["updates"]] == ["/a.md"]

    # The next mount pushes the restored version.
    m2 = mounts.mount(store, name="mnt")
    m2.wait_synced()
    assert server_memories(server, store) == {"/a.md": "mine a\n", "/b.md": "theirs /b.md\n"}
    assert cat(m2.path / "a.md") == "mine a\n"


def test_restore_after_file_was_removed_recreates_it(mounts, server):
    store, mid, m, f = make_conflict(mounts, server, "/x/y.md")
    # The memory disappears on the server (and so from the tree).
    server.sdk().beta.memory_stores.memories.delete(mid, memory_store_id=store)
    m.sync_now()
    wait_for(lambda: not f.exists(), what="file gone")
    m.memfs("conflicts", "restore", "1", "--mountpoint", str(m.path))
    wait_for(lambda: f.exists() and cat(f) == "mine\n", what="re-created")
    flush(m)
    mems = sdk_by_path(server, store)
    assert set(mems) == {"/x/y.md"} and mems["/x/y.md"].id != mid
    assert server_memories(server, store)["/x/y.md"] == "mine\n"


def test_errors(mounts, server):
    store, mid, m, f = make_conflict(mounts, server)
    bad = m.memfs("conflicts", "restore", "99", "--mountpoint", str(m.path), check=False)
    assert bad.returncode != 0 and "no conflict #99" in bad.stderr
    bad = m.memfs("conflicts", "discard", "99", check=False)
    assert bad.returncode != 0 and "#99" in bad.stderr
    bad = m.memfs("conflicts", str(m.path.parent / "nope"), check=False)
    assert bad.returncode != 0 and "not a memfs mount" in bad.stderr
    assert len(conflicts(m)) == 1


def test_conflicts_without_a_mountpoint_lists_those_unmounted_mounts_keep(mounts, server):
    """An unmount that keeps a conflict says `memfs conflicts` shows it; without a
    MOUNTPOINT that command listed live mounts only ("no conflicts", or "no memfs mounts
    are running"). Found by a helper, 6 December."""
    store, mid, m, f = make_conflict(mounts, server)
    out = m.unmount(kept=True)
    assert "memfs conflicts shows each" in out, out
    listed = m.memfs("conflicts").stdout
    assert f"#1 /notes/a.md  ({m.path})" in listed, listed
    other = mounts.mount(mounts.new_store("live"), name="other")  # a live mount beside it
    listed = other.memfs("conflicts", "--json").stdout
    assert [(r["path"], r["mountpoint"]) for r in json.loads(listed)] == [
        ("/notes/a.md", str(m.path))], listed
    other.unmount()
