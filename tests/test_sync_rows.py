"""One test per row of the merge table (docs/SYNC.md), on real mounts, with the
official SDK as the second writer.

"Dirty" is made deterministic with a long write-back delay on the mount
(`--write-back-delay 30`): a local edit stays unpushed while the SDK changes
the server, then `m.sync_now()` runs a reconcile pass at once. Nothing here
asserts on the clock: every wait polls with a generous deadline.
"""

from __future__ import annotations

import os

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from mountutil import mounts, needs_fuse, server_memories  # noqa: F401
from synchelpers import (
    cat,
    conflicts,
    flush,
    sdk_by_path,
    sdk_create,
    sdk_delete,
    sdk_update,
    versions,
    wait_for,
    xattr,
)

pytestmark = needs_fuse

HOLD = ("--write-back-delay", "30")  # local edits stay dirty until flushed


def seeded(mounts, server, files: dict[str, str], *args: str, name: str = "mnt"):
    """A store holding files (created through the SDK), mounted and listed."""
    store = mounts.new_store()
    for path, content in files.items():
        sdk_create(server, store, path, content)
    m = mounts.mount(store, *args, name=name)
    for path, content in files.items():
        wait_for(lambda p=path, c=content: cat(m.path / p.lstrip("/")) == c, what=path)
    return store, m


def test_same_same_nothing_happens(mounts, server):
    store, m = seeded(mounts, server, {"/a.md": "one\n"})
    before = versions(server, store)
    m.sync_now()
    m.sync_now()
    assert cat(m.path / "a.md") == "one\n"
    assert xattr(m.path / "a.md") == "synced"
    assert conflicts(m) == []
    assert len(versions(server, store)) == len(before)  # nothing was pushed


def test_server_changed_local_clean_new_content_visible(mounts, server):
    store, m = seeded(mounts, server, {"/a.md": "one\n"})
    mid = sdk_by_path(server, store)["/a.md"].id
    sdk_update(server, store, mid, content="two, and longer\n")
    m.sync_now()
    wait_for(lambda: cat(m.path / "a.md") == "two, and longer\n", what="new content")
    assert os.stat(m.path / "a.md").st_size == len("two, and longer\n")
    assert xattr(m.path / "a.md") == "synced"
    assert conflicts(m) == []


def test_server_changed_local_dirty_conflict_restore_discard(mounts, server):
    store, m = seeded(mounts, server, {"/a.md": "base\n", "/b.md": "base b\n"}, *HOLD)
    ids = {p: mm.id for p, mm in sdk_by_path(server, store).items()}
    (m.path / "a.md").write_text("mine\n")
    (m.path / "b.md").write_text("mine b\n")
    sdk_update(server, store, ids["/a.md"], content="theirs\n")
    sdk_update(server, store, ids["/b.md"], content="theirs b\n")
    m.sync_now()

    # The server's version wins in the tree; ours is preserved and listed.
    wait_for(lambda: cat(m.path / "a.md") == "theirs\n", what="server version in tree")
    wait_for(lambda: cat(m.path / "b.md") == "theirs b\n", what="server version in tree")
    rows = {r["path"]: r for r in conflicts(m)}
    assert set(rows) == {"/a.md", "/b.md"}
    a = rows["/a.md"]
    assert a["local_content"] == "mine\n" and a["server_content"] == "theirs\n"
    assert a["memory_id"] == ids["/a.md"]
    assert "-theirs" in a["diff"] and "+mine" in a["diff"]
    assert xattr(m.path / "a.md") == "conflict"
    st = m.status()
    assert {c["path"] for c in st["conflicts"]} == {"/a.md", "/b.md"}
    assert not st["pending"]["updates"]  # the tree is clean: nothing is pushed over theirs

    # restore: ours goes back into the tree and is pushed as an update.
    m.memfs("conflicts", "restore", str(a["id"]), "--mountpoint", str(m.path))
    wait_for(lambda: cat(m.path / "a.md") == "mine\n", what="restored content")
    flush(m)
    assert server_memories(server, store)["/a.md"] == "mine\n"
    history = [v.content for v in versions(server, store, ids["/a.md"])]
    assert "theirs\n" in history  # the server's version is not lost either
    assert sdk_by_path(server, store)["/a.md"].id == ids["/a.md"]

    # discard: the row goes, the tree keeps the server's version.
    m.memfs("conflicts", "discard", str(rows["/b.md"]["id"]), "--mountpoint", str(m.path))
    assert conflicts(m) == []
    assert cat(m.path / "b.md") == "theirs b\n"
    assert xattr(m.path / "b.md") == "synced"
    assert server_memories(server, store) == {"/a.md": "mine\n", "/b.md": "theirs b\n"}


def test_server_changed_to_local_sha_is_adopted(mounts, server):
    store, m = seeded(mounts, server, {"/a.md": "base\n"}, *HOLD)
    mid = sdk_by_path(server, store)["/a.md"].id
    (m.path / "a.md").write_text("same bytes\n")
    assert xattr(m.path / "a.md") == "pending"
    sdk_update(server, store, mid, content="same bytes\n")
    m.sync_now()
    wait_for(lambda: xattr(m.path / "a.md") == "synced", what="adopted")
    assert conflicts(m) == []
    assert m.pending_total() == 0
    assert cat(m.path / "a.md") == "same bytes\n"


def test_remote_rename_moves_the_node(mounts, server):
    store, m = seeded(mounts, server, {"/old/a.md": "x\n"})
    mid = sdk_by_path(server, store)["/old/a.md"].id
    sdk_update(server, store, mid, path="/new/place/a.md")
    m.sync_now()
    wait_for(lambda: (m.path / "new" / "place" / "a.md").exists(), what="moved node")
    wait_for(lambda: not (m.path / "old").exists(), what="emptied directory pruned")
    assert cat(m.path / "new" / "place" / "a.md") == "x\n"
    assert xattr(m.path / "new" / "place" / "a.md", "user.memfs.memory_id") == mid
    assert m.pending_total() == 0


def test_remote_rename_and_edit_while_dirty(mounts, server):
    """Both changed: the node follows the server's rename, content is a conflict."""
    store, m = seeded(mounts, server, {"/a.md": "base\n"}, *HOLD)
    mid = sdk_by_path(server, store)["/a.md"].id
    (m.path / "a.md").write_text("mine\n")
    sdk_update(server, store, mid, path="/b.md", content="theirs\n")
    m.sync_now()
    wait_for(lambda: not (m.path / "a.md").exists(), what="old name gone")
    wait_for(lambda: cat(m.path / "b.md") == "theirs\n", what="server version, new name")
    [row] = conflicts(m)
    assert row["local_content"] == "mine\n"
    flush(m)
    assert server_memories(server, store) == {"/b.md": "theirs\n"}  # not renamed back


def test_remote_delete_of_clean_file_removes_it(mounts, server):
    store, m = seeded(mounts, server, {"/d/a.md": "x\n", "/keep.md": "k\n"})
    sdk_delete(server, store, sdk_by_path(server, store)["/d/a.md"].id)
    m.sync_now()
    wait_for(lambda: not (m.path / "d" / "a.md").exists(), what="file gone")
    assert sorted(os.listdir(m.path)) == ["keep.md"]
    assert m.pending_total() == 0
    assert set(server_memories(server, store)) == {"/keep.md"}
    # The emptied directory was pruned and its kernel entry dropped: a memory
    # appearing under the same directory name is reachable again.
    sdk_create(server, store, "/d/b.md", "b\n")
    m.sync_now()
    wait_for(lambda: cat(m.path / "d" / "b.md") == "b\n", what="file in re-made dir")


def test_remote_delete_of_dirty_file_writable_recreates(mounts, server):
    store, m = seeded(mounts, server, {"/a.md": "base\n"}, *HOLD)
    old_id = sdk_by_path(server, store)["/a.md"].id
    (m.path / "a.md").write_text("edited here\n")
    sdk_delete(server, store, old_id)
    m.sync_now()
    assert cat(m.path / "a.md") == "edited here\n"
    assert [c["path"] for c in m.status()["pending"]["creates"]] == ["/a.md"]
    flush(m)
    on_server = sdk_by_path(server, store)
    assert server_memories(server, store) == {"/a.md": "edited here\n"}
    assert on_server["/a.md"].id != old_id  # a new memory, re-created from the file
    assert xattr(m.path / "a.md") == "synced"


def test_remote_delete_of_dirty_file_read_only_keeps_it(mounts, server):
    store, m = seeded(mounts, server, {"/a.md": "base\n"}, *HOLD)
    (m.path / "a.md").write_text("edited here\n")  # durable in state.db, not pushed
    m.kill9()
    ro = mounts.mount(store, "--read-only", name="mnt")
    assert cat(ro.path / "a.md") == "edited here\n"
    sdk_delete(server, store, sdk_by_path(server, store)["/a.md"].id)
    ro.sync_now()
    ro.sync_now()
    assert cat(ro.path / "a.md") == "edited here\n"  # kept, local and unsynced
    assert xattr(ro.path / "a.md") == "pending"  # never pushed: the reason says why
    assert "not on the server" in xattr(ro.path / "a.md", "user.memfs.reason")
    assert "read-only" in xattr(ro.path / "a.md", "user.memfs.reason")
    st = ro.status()
    assert [x["path"] for x in st["pending"]["local_only"]] == ["/a.md"]
    assert "read-only" in st["pending"]["local_only"][0]["reason"]
    assert not st["pending"]["creates"] and not st["pending"]["updates"]
    assert any("a.md" in w and "read-only" in w for w in st["warnings"])
    ro.unmount(kept=True)  # exit status 3: a.md stays here only
    assert server_memories(server, store) == {}  # nothing was ever pushed


def test_new_remote_memory_appears(mounts, server):
    store, m = seeded(mounts, server, {"/a.md": "a\n"})
    os.listdir(m.path / ".")  # let the kernel cache the directory (negative entries too)
    assert not (m.path / "sub" / "new.md").exists()
    sdk_create(server, store, "/sub/new.md", "fresh\n")
    m.sync_now()
    wait_for(lambda: (m.path / "sub" / "new.md").exists(), what="new file")
    assert cat(m.path / "sub" / "new.md") == "fresh\n"
    assert xattr(m.path / "sub" / "new.md") == "synced"


def test_remote_wipe_empties_mount_and_uploads_nothing(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    for i in range(6):
        (m.path / f"f{i}.md").write_text(f"{i}\n")
    (m.path / "d").mkdir()
    (m.path / "d" / "g.md").write_text("g\n")
    m.wait_synced()
    assert len(server_memories(server, store)) == 7
    for mem in sdk_by_path(server, store).values():
        sdk_delete(server, store, mem.id)
    m.sync_now()
    wait_for(lambda: os.listdir(m.path) == [], what="mount empty")
    m.sync_now()  # a second pass: still nothing to push
    assert m.pending_total() == 0
    m.unmount()
    assert server_memories(server, store) == {}


def test_local_delete_vs_remote_edit_server_wins(mounts, server):
    store, m = seeded(mounts, server, {"/a.md": "base\n"}, "--delete-delay", "30")
    mid = sdk_by_path(server, store)["/a.md"].id
    (m.path / "a.md").unlink()
    assert [d["path"] for d in m.status()["pending"]["deletes"]] == ["/a.md"]
    assert m.status()["pending"]["deletes"][0]["due_at"] is not None
    sdk_update(server, store, mid, content="edited there\n")
    m.sync_now()
    wait_for(lambda: (m.path / "a.md").exists(), what="file back")
    assert cat(m.path / "a.md") == "edited there\n"
    assert m.pending_total() == 0  # the delete is cancelled
    assert xattr(m.path / "a.md", "user.memfs.memory_id") == mid
    m.unmount()
    assert server_memories(server, store) == {"/a.md": "edited there\n"}
