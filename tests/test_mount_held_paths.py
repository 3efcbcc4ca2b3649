"""A server change the mount could not place when it saw it, because a local file held
its path, lands at the next feed poll once the path frees (found by the long Hypothesis
run of the interleaving harness, 4 December; before, it waited for the next full
listing, ten minutes by default, while the file's own create met the memory, 409, on
every pass).

Each test sees the change first in a full listing (`sync_now(full=True)`), frees the
path, then asks for one feed poll (`sync_now()`): the feed had shown the change already,
so only the mount's own "name it again" brings it in. Background polls and the
write-back delay are an hour: nothing else moves meanwhile.
"""

from __future__ import annotations

import pytest

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from mountutil import mounts, needs_fuse, server_memories  # noqa: F401
from synchelpers import (
    QUIET,
    cat,
    conflicts,
    flush,
    pushed,
    sdk_by_path,
    sdk_create,
    sdk_update,
    wait_for,
)

pytestmark = [pytest.mark.mount, needs_fuse]

def test_their_rename_onto_a_file_with_unsaved_writes_lands_once_saved(mounts, server):
    """Another writer renames our /a.md to /c.md, where our new, unpushed /c.md has
    unsaved writes: the writes keep the place; saved, /c.md yields to the server's
    rename, its content kept as a conflict."""
    store = mounts.new_store()
    m = mounts.mount(store, *QUIET)
    (m.path / "a.md").write_text("theirs to move\n")
    flush(m)
    mid = sdk_by_path(server, store)["/a.md"].id
    (m.path / "c.md").write_text("mine\n")  # stays local: the write-back delay
    # No subprocess may run while f is open: a fork+exec closes the inherited
    # descriptor, and every close is a FUSE flush (a save). sync_now and the SDK run here.
    f = open(m.path / "c.md", "r+")  # noqa: SIM115 - closed below
    try:
        f.write("MINE")
        f.flush()
        sdk_update(server, store, mid, path="/c.md")
        m.sync_now(full=True)  # the listing sees the rename; the writes hold /c.md
        assert (m.path / "a.md").exists()
    finally:
        f.close()
    m.sync_now()  # one feed poll: the rename, shown before, is named again
    # (the kernel forgets its cached entries when the daemon's invalidations reach it)
    wait_for(lambda: not (m.path / "a.md").exists(), what="/a.md moved away")
    assert cat(m.path / "c.md") == "theirs to move\n"
    assert [c["local_content"] for c in conflicts(m)] == ["MINE\n"]
    flush(m)
    assert server_memories(server, store) == {"/c.md": "theirs to move\n"}
    assert sdk_by_path(server, store)["/c.md"].id == mid


def test_deleted_here_edited_there_comes_back_when_our_rename_there_goes(mounts, server):
    """/a.md deleted here and edited there (the edit wins) while our /b.md, renamed to
    /a.md, holds the path; once that file is deleted too, /a.md's memory comes back
    with the server's edit."""
    store = mounts.new_store()
    m = mounts.mount(store, *QUIET)
    ids = pushed(m, server, store, {"a.md": "a\n", "b.md": "b\n"})
    (m.path / "a.md").unlink()  # a pending delete: the delete delay
    sdk_update(server, store, ids["/a.md"], content="a, edited there\n")
    (m.path / "b.md").rename(m.path / "a.md")  # a pending rename: the write-back delay
    m.sync_now(full=True)  # the edit wins over our delete, but /a.md is our /b.md here
    assert cat(m.path / "a.md") == "b\n"
    (m.path / "a.md").unlink()
    m.sync_now()
    wait_for(lambda: (m.path / "a.md").exists(), what="/a.md back")
    assert cat(m.path / "a.md") == "a, edited there\n"
    flush(m)
    assert server_memories(server, store) == {"/a.md": "a, edited there\n"}
    assert sdk_by_path(server, store)["/a.md"].id == ids["/a.md"]


def test_a_file_where_their_directory_is_waits_reported_until_moved(mounts, server):
    """Our new file /d and another writer's /d/e.md cannot both be shown: the server's
    memory stays hidden and our create waits (docs/SYNC.md), both named by `memfs
    status`, and `memfs unmount` names the file and the server's reason (before, it
    said only "1 left"). Mounted again and the file moved, both go through."""
    store = mounts.new_store()
    m = mounts.mount(store, *QUIET)
    (m.path / "d").write_text("mine\n")  # stays local: the write-back delay
    sdk_create(server, store, "/d/e.md", "theirs\n")
    reply = flush(m)
    assert reply["left"] == 1 and [w["path"] for w in reply["waiting"]] == ["/d"], reply
    assert "is a directory of existing memory '/d/e.md'" in reply["waiting"][0]["reason"]
    m.sync_now(full=True)
    status = m.status()
    assert [c["path"] for c in status["pending"]["creates"]] == ["/d"], status
    assert any("/d/e.md overlaps a local" in w for w in status["warnings"]), status
    assert cat(m.path / "d") == "mine\n" and not (m.path / "d.md").exists()
    out = m.unmount(kept=True)
    assert "pushed 0 change(s), 1 left" in out, out
    assert ("  1 change(s) the server turned down last time stay journaled, tried again "
            "on the next mount:\n    /d: PathConflictError: ") in out, out
    again = mounts.mount(store, *QUIET, name="again")
    (again.path / "d").rename(again.path / "d.md")
    flush(again)
    again.sync_now(full=True)
    wait_for(lambda: (again.path / "d" / "e.md").exists(), what="their /d/e.md shown")
    assert cat(again.path / "d" / "e.md") == "theirs\n"
    assert server_memories(server, store) == {"/d.md": "mine\n", "/d/e.md": "theirs\n"}
