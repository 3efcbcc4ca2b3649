"""`memfs history`, `memfs show`, `memfs restore` and the `.memfs/versions` tree, on
real mounts against a real `memfs serve`, with the official SDK as the other client."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from mountutil import mounts, needs_fuse, server_memories  # noqa: F401
from synchelpers import cat, conflicts, flush, wait_for, xattr

pytestmark = needs_fuse

SESSION = "sesn_011CZkZbqJ2Xkz5pHistory0"  # as long as a real one


def agent(server):
    """Another writer: the official SDK, writing as an agent session."""
    return server.sdk(default_headers={"x-memfs-session-id": SESSION}).beta.memory_stores


def history(m, f) -> list[dict]:
    return json.loads(m.memfs("history", str(f), "--json").stdout)


def show(m, spec, *extra, check=True):
    """`memfs show`, stdout as bytes."""
    return subprocess.run([sys.executable, "-m", "memfs", "show", str(spec), *extra],
                          env=m.env, capture_output=True, timeout=60, check=check)


def edit_sequence(mounts, server):
    """a.md: created v1, v2 here; renamed to b.md here; v3 by an agent session."""
    store = mounts.new_store()
    m = mounts.mount(store)
    d = m.path / "notes"
    d.mkdir()
    (d / "a.md").write_text("v1\n")
    m.wait_synced()
    (d / "a.md").write_text("v2\n")
    m.wait_synced()
    os.rename(d / "a.md", d / "b.md")
    m.wait_synced()
    mid = xattr(d / "b.md", "user.memfs.memory_id")
    agent(server).memories.update(mid, memory_store_id=store, content="v3 by the agent\n")
    m.sync_now()
    wait_for(lambda: cat(d / "b.md") == "v3 by the agent\n", what="the agent's edit")
    return store, m, d / "b.md", mid


def test_history_show_restore_and_deleted(mounts, server):
    store, m, f, mid = edit_sequence(mounts, server)
    rows = history(m, f)
    assert [r["operation"] for r in rows] == ["modified", "modified", "modified", "created"]
    assert [r["path"] for r in rows] == ["/notes/b.md", "/notes/b.md", "/notes/a.md",
                                          "/notes/a.md"]
    assert rows[0]["author"] == f"session:{SESSION}"
    assert all(r["author"].startswith("api:apikey_") for r in rows[1:])
    assert [r["size"] for r in rows] == [16, 3, 3, 3]
    assert all(r["memory_id"] == mid for r in rows)
    assert rows == sorted(rows, key=lambda r: r["created_at"], reverse=True)
    text = m.memfs("history", str(f)).stdout
    assert f"session:{SESSION}" in text and rows[-1]["id"] in text and "created" in text
    # one column each: the version ids line up under a session's long author too
    starts = {line.index("memver_") for line in text.splitlines()[1:]}
    assert len(starts) == 1, text
    v1, v2 = rows[3]["id"], rows[2]["id"]

    # show: bytes exactly, both spellings.
    assert show(m, f"{f}@{v1}").stdout == b"v1\n"
    assert show(m, f, "--version", v2).stdout == b"v2\n"

    # restore v1: an ordinary preconditioned update; the server holds v1 again.
    out = m.memfs("restore", str(f), "--version", v1).stdout
    assert "pushed" in out
    assert server_memories(server, store)["/notes/b.md"] == "v1\n"
    assert cat(f) == "v1\n"
    rows = history(m, f)
    assert len(rows) == 5 and rows[0]["operation"] == "modified"
    assert rows[0]["author"].startswith("api:") and rows[0]["sha256"] == rows[-1]["sha256"]

    # Delete it: history of the path still works, and shows the delete.
    f.unlink()
    m.wait_synced()
    wait_for(lambda: "/notes/b.md" not in server_memories(server, store), what="delete")
    rows = history(m, f)
    assert rows[0]["operation"] == "deleted" and len(rows) == 6
    gone = show(m, f"{f}@{rows[0]['id']}", check=False)
    assert gone.returncode != 0 and b"delete" in gone.stderr and gone.stdout == b""
    # restore re-creates it at its last path (a new memory with that content).
    out = m.memfs("restore", str(f), "--version", v2).stdout
    assert "re-created" in out
    assert cat(f) == "v2\n"
    assert server_memories(server, store)["/notes/b.md"] == "v2\n"
    assert xattr(f, "user.memfs.memory_id") != mid

    # A version of another memory than the file's: refused, no content.
    wrong = show(m, f, "--version", v1, check=False)
    assert wrong.returncode == 1 and wrong.stdout == b"" and b"another memory" in wrong.stderr


def test_show_redacted_version_says_so(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    f = m.path / "r.md"
    f.write_text("secret\n")
    m.wait_synced()
    f.write_text("public\n")
    m.wait_synced()
    old = history(m, f)[-1]["id"]
    server.sdk().beta.memory_stores.memory_versions.redact(old, memory_store_id=store)
    red = show(m, f"{f}@{old}", check=False)
    assert red.returncode == 1 and red.stdout == b""
    assert b"redacted" in red.stderr
    rows = history(m, f)
    assert rows[-1]["redacted_at"] and rows[-1]["path"] is None


def test_restore_racing_a_remote_edit_is_a_conflict(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store, "--poll-interval", "3600", "--full-resync", "3600")
    f = m.path / "a.md"
    f.write_text("one\n")
    m.wait_synced()
    f.write_text("two\n")
    m.wait_synced()
    v1 = history(m, f)[-1]["id"]
    mid = xattr(f, "user.memfs.memory_id")
    # The agent edits; the mount has not heard of it (no poll for an hour).
    agent(server).memories.update(mid, memory_store_id=store, content="theirs\n")
    r = m.memfs("restore", str(f), "--version", v1, check=False)
    assert r.returncode == 1 and "conflict" in r.stderr
    # Nothing lost: the server's edit is in the tree and on the server, ours is a conflict.
    assert server_memories(server, store)["/a.md"] == "theirs\n"
    wait_for(lambda: cat(f) == "theirs\n", what="the server's version in the tree")
    [row] = conflicts(m)
    assert row["memory_id"] == mid and "+one" in row["diff"] and "-theirs" in row["diff"]


def test_restore_over_changes_not_on_the_server_asks_for_force(mounts, server):
    """`memfs restore` wrote over a file whose own bytes were not on the server (an edit
    not pushed yet, a refused file) and said it was pushed: those bytes were gone for
    good (found by a helper, 6 December). It now refuses, says why, and replaces them
    only with --force."""
    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "300")
    f = m.path / "a.md"
    f.write_text("one\n")
    flush(m)
    v1 = history(m, f)[-1]["id"]
    for local in (b"unpushed edit\n", b"refused \xff\n"):
        f.write_bytes(local)
        if b"\xff" in local:
            flush(m)  # the server refuses it: it stays here only
        r = m.memfs("restore", str(f), "--version", v1, check=False)
        assert r.returncode == 1 and "holds changes that are not on the server" in r.stderr
        assert "--force" in r.stderr and f.read_bytes() == local
    out = m.memfs("restore", str(f), "--version", v1, "--force").stdout
    assert "pushed" in out and cat(f) == "one\n"


def ls(path) -> list[str]:
    """`ls -a` (memfs lists no '.' and '..' entries)."""
    return subprocess.run(["ls", "-a", str(path)], capture_output=True, text=True,
                          check=True, timeout=30).stdout.split()


def test_versions_tree(mounts, server):
    store, m, f, mid = edit_sequence(mounts, server)
    (m.path / "x.md").write_text("short-lived\n")
    m.wait_synced()
    (m.path / "x.md").unlink()
    m.wait_synced()
    wait_for(lambda: "/x.md" not in server_memories(server, store), what="delete")

    # Hidden from the root's listing, reachable by name.
    assert ".memfs" not in ls(m.path)
    assert ls(m.path / ".memfs") == ["versions"]
    vroot = m.path / ".memfs" / "versions"
    wait_for(lambda: "x.md" in ls(vroot), what="the deleted memory in the tree")
    assert sorted(ls(vroot)) == ["notes", "x.md"]
    assert ls(vroot / "notes") == ["b.md"]  # the memory's current path
    names = ls(vroot / "notes" / "b.md")
    assert len(names) == 4 and names == sorted(names)
    assert [n.rsplit("-", 1)[-1] for n in names] == [r["id"] for r in reversed(history(m, f))]
    got = [cat(vroot / "notes" / "b.md" / n) for n in names]
    assert got == ["v1\n", "v2\n", "v2\n", "v3 by the agent\n"]
    st = os.stat(vroot / "notes" / "b.md" / names[0])
    assert st.st_mode & 0o777 == 0o644 and st.st_size == 3

    # diff of two versions, grep -r under the tree.
    d = subprocess.run(["diff", str(vroot / "notes/b.md" / names[0]),
                        str(vroot / "notes/b.md" / names[3])],
                       capture_output=True, text=True, timeout=30)
    assert d.returncode == 1 and "< v1" in d.stdout and "> v3 by the agent" in d.stdout
    g = subprocess.run(["grep", "-r", "short-lived", str(vroot)], capture_output=True,
                       text=True, timeout=30)
    assert g.returncode == 0 and "x.md/" in g.stdout
    # ... while grep -r of the mount itself never walks into the hidden tree.
    g = subprocess.run(["grep", "-r", "short-lived", str(m.path)], capture_output=True,
                       text=True, timeout=30)
    assert g.returncode == 1 and g.stdout == ""

    # The deleted memory: its versions and its delete.
    xs = ls(vroot / "x.md")
    assert len(xs) == 2 and xs[1].endswith("-deleted")
    assert cat(vroot / "x.md" / xs[0]) == "short-lived\n"

    # Read-only, whatever the call.
    v = vroot / "notes" / "b.md" / names[0]
    def write(path):
        with open(path, "w") as fd:
            fd.write("x")

    for action in (lambda: write(v),
                   lambda: write(vroot / "notes" / "new"),
                   lambda: os.unlink(v),
                   lambda: os.mkdir(vroot / "d"),
                   lambda: os.rename(v, m.path / "stolen"),
                   lambda: os.rename(m.path / "notes" / "b.md", vroot / "b.md"),
                   lambda: os.chmod(v, 0o644),
                   lambda: os.truncate(v, 0),
                   lambda: os.rmdir(m.path / ".memfs")):
        with pytest.raises(OSError) as info:
            action()
        assert info.value.errno == errno.EROFS, action
    assert not os.path.exists(m.path / "stolen")
    assert cat(f) == "v3 by the agent\n"

    # Never synced: the server holds exactly the two memories' paths.
    assert sorted(server_memories(server, store)) == ["/notes/b.md"]

    # --show-meta: listed in the root.
    m.unmount()
    m2 = mounts.mount(store, "--show-meta", name="mnt2")
    assert ".memfs" in ls(m2.path)
    assert "versions" in ls(m2.path / ".memfs")


def test_remote_memory_under_memfs_is_hidden(mounts, server):
    store = mounts.new_store()
    server.sdk().beta.memory_stores.memories.create(store, path="/.memfs/x.md", content="x")
    server.sdk().beta.memory_stores.memories.create(store, path="/seen.md", content="y")
    m = mounts.mount(store)
    wait_for(lambda: (m.path / "seen.md").exists(), what="the listing")
    assert not (m.path / ".memfs" / "x.md").exists()
    assert ls(m.path / ".memfs") == ["versions"]
    # It has versions like any memory, so the versions tree shows it.
    assert "x.md" in ls(m.path / ".memfs" / "versions" / ".memfs")


def test_session_root_history_and_tree(mounts, server):
    """Under `memfs mount --all ROOT`: each store directory has its own `.memfs`, and
    the commands find the store from the directory a file is in."""
    sdk = server.sdk().beta.memory_stores
    a = sdk.create(name="alpha").id
    b = sdk.create(name="beta").id
    sdk.memories.create(b, path="/same.md", content="beta's\n")
    m = mounts.mount_group("--all")
    f = m.path / "alpha" / "same.md"
    f.write_text("one\n")
    m.wait_synced()
    f.write_text("two\n")
    m.wait_synced()
    rows = history(m, f)
    assert [r["operation"] for r in rows] == ["modified", "created"]
    assert show(m, f"{f}@{rows[-1]['id']}").stdout == b"one\n"
    assert [r["operation"] for r in history(m, m.path / "beta" / "same.md")] == ["created"]
    assert ".memfs" not in ls(m.path / "alpha")
    d = m.path / "alpha" / ".memfs" / "versions" / "same.md"
    assert [cat(d / n) for n in ls(d)] == ["one\n", "two\n"]
    assert ls(m.path / "beta" / ".memfs" / "versions" / "same.md")[0].endswith(
        history(m, m.path / "beta" / "same.md")[0]["id"])
    with pytest.raises(OSError) as info:
        (d / "x").write_text("x")
    assert info.value.errno == errno.EROFS
    m.memfs("restore", str(f), "--version", rows[-1]["id"])
    assert server_memories(server, a) == {"/same.md": "one\n"}
    assert server_memories(server, b) == {"/same.md": "beta's\n"}
