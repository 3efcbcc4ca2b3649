"""`memfs mount --session ID ROOT`: a session's memory stores as one mount, through a real
mount against a real `memfs serve`, the session made with the official SDK."""

from __future__ import annotations

import errno
import json
import os
import subprocess

import pytest
from mountutil import errno_of, mount_env, needs_fuse, server_memories, strand_under_url_key

pytestmark = needs_fuse


def make_session(sdk, resources) -> str:
    return sdk.beta.sessions.create(agent="agent_test", environment_id="env_test",
                                    resources=resources).id


@pytest.fixture
def two_stores(server):
    sdk = server.sdk()
    prefs = sdk.beta.memory_stores.create(name="User Preferences").id
    docs = sdk.beta.memory_stores.create(name="Reference Docs",
                                         description="read me").id
    sdk.beta.memory_stores.memories.create(prefs, path="/style.md", content="tabs\n")
    sdk.beta.memory_stores.memories.create(docs, path="/api/v1.md", content="GET /x\n")
    sid = make_session(sdk, [
        {"type": "memory_store", "memory_store_id": prefs},
        {"type": "memory_store", "memory_store_id": docs, "access": "read_only"},
    ])
    return sdk, sid, prefs, docs


def test_session_view_access_and_attribution(server, mounts, two_stores):
    sdk, sid, prefs, docs = two_stores
    m = mounts.mount_group("--session", sid)
    root = m.path
    # The view: the resources' mount_path names, the marker, the contents.
    session = sdk.beta.sessions.retrieve(sid)
    names = sorted(os.path.basename(r.mount_path) for r in session.resources)
    assert names == ["reference-docs", "user-preferences"]
    assert sorted(os.listdir(root)) == names
    assert (root / "user-preferences" / "style.md").read_text() == "tabs\n"
    assert (root / "reference-docs" / "api" / "v1.md").read_text() == "GET /x\n"
    assert (root / "reference-docs" / ".anthropic-memory-store").read_bytes() == \
        f"version 1\n{docs}".encode()
    # Access errors: the root, the read-only store, the read-write store.
    assert errno_of(lambda: (root / "x.md").write_text("x")) == errno.EROFS
    assert errno_of(lambda: (root / "d").mkdir()) == errno.EROFS
    ro = root / "reference-docs"
    assert errno_of(lambda: (ro / "new.md").write_text("x")) == errno.EROFS
    assert errno_of(lambda: (ro / "api" / "v1.md").write_text("x")) == errno.EROFS
    assert errno_of(lambda: (ro / "api" / "v1.md").unlink()) == errno.EROFS
    assert errno_of(lambda: os.rename(ro / "api", ro / "api2")) == errno.EROFS
    assert errno_of(lambda: (ro / "sub").mkdir()) == errno.EROFS
    rw = root / "user-preferences"
    assert errno_of(lambda: (rw / ".anthropic-memory-store").write_text("x")) == errno.EROFS
    (rw / "style.md").write_text("spaces\n")
    (rw / "new" / "deep.md").parent.mkdir()
    (rw / "new" / "deep.md").write_text("from the session\n")
    m.wait_synced()
    assert server_memories(server, prefs) == {"/style.md": "spaces\n",
                                              "/new/deep.md": "from the session\n"}
    assert server_memories(server, docs) == {"/api/v1.md": "GET /x\n"}
    # Attribution: the session's writes are the session's versions.
    versions = list(sdk.beta.memory_stores.memory_versions.list(prefs))
    ours = [v for v in versions if v.operation in ("modified", "created")
            and v.created_by.type == "session_actor"]
    assert {v.created_by.session_id for v in ours} == {sid}
    assert len(ours) == 2  # style.md modified, new/deep.md created; the seed was the API's
    assert any(v.created_by.type == "api_actor" for v in versions)
    # The key the daemon holds is the session's, never in its argv.
    with open(f"/proc/{m.pid}/cmdline", "rb") as f:
        argv = f.read()
    assert b"memfs_sesstok_" not in argv and b"test-key" not in argv
    # `ps` names the session root (memfs/local/titles.py).
    assert argv.decode().startswith(f"memfs: session {sid} on {root} ("), argv
    # Status per store; unmount reports per store.
    st = m.status()
    assert st["session_id"] == sid and [s["name"] for s in st["stores"]] == [
        "user-preferences", "reference-docs"]
    assert [s["read_only"] for s in st["stores"]] == [False, True]
    # One store's directory is that store of the live root (it said "daemon: not
    # running (from state.db)": a helper, 6 December).
    one = m.memfs("status", str(ro)).stdout
    assert "\n  online (read-only)\n" in one and "not running" not in one, one
    assert one.startswith(f"{ro}: store Reference Docs ({docs})"), one
    assert json.loads(m.memfs("status", "--json", str(ro)).stdout)["running"] is True


def test_session_unmount_flushes_every_store(server, mounts):
    sdk = server.sdk()
    ids = [sdk.beta.memory_stores.create(name=f"Notes {i}").id for i in range(3)]
    sid = make_session(sdk, [{"type": "memory_store", "memory_store_id": i} for i in ids])
    m = mounts.mount_group("--session", sid, args=("--write-back-delay", "60"),
                           defaults=False)
    for i in range(3):
        for j in range(4):
            (m.path / f"notes-{i}" / f"f{j}.md").write_text(f"{i}.{j}\n")
    assert m.pending_total() == 12
    out = m.unmount()
    assert "pushed 12 change(s), 0 left" in out
    for i, store in enumerate(ids):
        assert f"notes-{i} ({store}): pushed 4, 0 left" in out
        assert server_memories(server, store) == {f"/f{j}.md": f"{i}.{j}\n" for j in range(4)}


def test_session_same_slug_and_default_root(server, mounts, tmp_path):
    """Two stores whose names slug alike get distinct directories; ROOT defaults to the
    parent of the mount paths (/mnt/memory); unknown sessions are a clear error."""
    sdk = server.sdk()
    a = sdk.beta.memory_stores.create(name="Team Notes").id
    b = sdk.beta.memory_stores.create(name="team notes!").id
    sid = make_session(sdk, [{"type": "memory_store", "memory_store_id": a},
                             {"type": "memory_store", "memory_store_id": b}])
    m = mounts.mount_group("--session", sid)
    assert sorted(os.listdir(m.path)) == ["team-notes", "team-notes-2"]
    assert (m.path / "team-notes-2" / ".anthropic-memory-store").read_text().endswith(b)
    env = mount_env(server, tmp_path)
    bad = subprocess.run([*_memfs(), "mount", "--session", "sesn_nope", str(tmp_path / "r")],
                         env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "unknown session sesn_nope" in bad.stderr
    # The default ROOT, checked without mounting at /mnt/memory on the test machine.
    from memfs.cli.group import session_layout

    resources = sdk.beta.sessions.retrieve(sid).resources
    parents, layout = session_layout(resources)
    assert parents == ["/mnt/memory"] and [n for _, n in layout] == ["team-notes",
                                                                    "team-notes-2"]


def test_a_servers_mount_paths_name_plain_folders_under_mnt_memory_only():
    """What a server's `mount_path` may decide (found by a helper, 6 December): a session
    whose mount path was `~/.config/git` had `memfs mount --session ID` make ~/.config
    and mount the server's files as git's configuration (an alias ran). Without ROOT,
    only /mnt/memory is mounted; a folder name that is not one plain visible name (an
    escape sequence, a NUL, a name past 255 bytes, a dot name) gets the store's slug."""
    import click

    from memfs.api.models import SessionResource
    from memfs.cli.group import plan_session, session_layout

    def store(mount_path: str, name: str = "Notes") -> SessionResource:
        return SessionResource.from_json({"type": "memory_store", "name": name,
                                          "memory_store_id": "memstore_1",
                                          "mount_path": mount_path})

    odd = ["/mnt/memory/a\x1b[2Jb", "/mnt/memory/nul\x00x", "/mnt/memory/" + "n" * 256,
           "/mnt/memory/.memfs", "/mnt/memory/rtl\u202eevil", "/mnt/memory/.."]
    for mount_path in odd:
        assert session_layout([store(mount_path)]) == ([], [(store(mount_path), "notes")]), \
            mount_path
    home = store("/root/.config/git")
    assert session_layout([home]) == (["/root/.config"], [(home, "git")])

    class Session:
        resources = [home]

    with pytest.raises(click.ClickException, match="under /root/.config, not /mnt/memory; "
                                                   "give ROOT to mount them there"):
        plan_session(lambda fn: Session(), "sesn_x", None, url="http://127.0.0.1:1",
                     cache_dir=None, options=None, say=print)


def test_session_adopts_state_an_older_memfs_left_under_the_url_key(server, mounts):
    """A store's pending change kept under the URL key (memfs before server ids) is
    adopted by a session mount as by a plain one, and reaches the server."""
    sdk = server.sdk()
    store = sdk.beta.memory_stores.create(name="Kept Notes").id
    old_dir, new_dir = strand_under_url_key(mounts, server, store)
    sid = make_session(sdk, [{"type": "memory_store", "memory_store_id": store}])
    m = mounts.mount_group("--session", sid)
    assert "adopted 1 pending change(s) from an earlier state directory" in \
        m.outputs[-1].stderr
    assert not old_dir.exists() and m.registry()["stores"][0]["state_dir"] == str(new_dir)
    assert (m.path / "kept-notes" / "b.md").read_text() == "pending\n"
    m.wait_synced()
    assert server_memories(server, store) == {"/b.md": "pending\n"}


def _memfs() -> list[str]:
    import sys

    return [sys.executable, "-m", "memfs"]


def test_session_read_only_flag_covers_every_store(server, mounts):
    sdk = server.sdk()
    store = sdk.beta.memory_stores.create(name="Writable").id
    sdk.beta.memory_stores.memories.create(store, path="/a.md", content="a\n")
    sid = make_session(sdk, [{"type": "memory_store", "memory_store_id": store}])
    m = mounts.mount_group("--session", sid, args=("--read-only",))
    assert (m.path / "writable" / "a.md").read_text() == "a\n"
    assert errno_of(lambda: (m.path / "writable" / "a.md").write_text("b")) == errno.EROFS
    assert m.status()["stores"][0]["read_only"] is True


def test_conflicts_of_a_store_under_a_session_root(server, mounts):
    """`memfs conflicts` lists a session root's stores and restores through its daemon."""
    import json
    import time

    sdk = server.sdk()
    store = sdk.beta.memory_stores.create(name="Shared").id
    mid = sdk.beta.memory_stores.memories.create(store, path="/a.md", content="base\n").id
    sid = make_session(sdk, [{"type": "memory_store", "memory_store_id": store}])
    m = mounts.mount_group("--session", sid, args=("--write-back-delay", "30"),
                           defaults=False)
    f = m.path / "shared" / "a.md"
    (f).write_text("mine\n")
    sdk.beta.memory_stores.memories.update(mid, memory_store_id=store, content="theirs\n")
    from memfs.local import control

    assert control.request(m.state_dir, {"cmd": "sync"}, timeout=30)["ok"]
    deadline = time.monotonic() + 15
    while f.read_text() != "theirs\n":
        assert time.monotonic() < deadline, "the server's version never arrived"
        time.sleep(0.1)
    listed = json.loads(m.memfs("conflicts", "--json").stdout)  # every mount, every store
    assert [(r["path"], r["mountpoint"]) for r in listed] == [("/a.md", str(m.path / "shared"))]
    assert [r["id"] for r in json.loads(m.memfs("conflicts", str(m.path), "--json").stdout)] \
        == [listed[0]["id"]]
    out = m.memfs("conflicts", "restore", str(listed[0]["id"])).stdout
    assert "restored conflict" in out and f.read_text() == "mine\n"
    m.unmount()
    assert server_memories(server, store) == {"/a.md": "mine\n"}


def test_kill9_of_a_session_root_loses_nothing_closed(server, mounts):
    """A session root's daemon killed with writes closed but not pushed: each store's
    journal keeps them, and the next mount of the root pushes every one."""
    sdk = server.sdk()
    ids = [sdk.beta.memory_stores.create(name=f"Crash {i}").id for i in range(2)]
    sid = make_session(sdk, [{"type": "memory_store", "memory_store_id": i} for i in ids])
    m = mounts.mount_group("--session", sid, args=("--write-back-delay", "3600"),
                           defaults=False)
    for i in range(2):
        for j in range(3):
            (m.path / f"crash-{i}" / f"n{j}.md").write_text(f"{i}/{j}\n")
    assert m.pending_total() == 6
    m.kill9()
    assert all(server_memories(server, s) == {} for s in ids)  # nothing was pushed
    again = mounts.mount_group("--session", sid, name="root")
    again.wait_synced()
    for i, store in enumerate(ids):
        assert server_memories(server, store) == {f"/n{j}.md": f"{i}/{j}\n" for j in range(3)}


def test_unmount_of_a_root_whose_session_was_archived_says_how_its_changes_go_out(
        server, mounts):
    """The session archived while mounted: its token is refused (401), the root's changes
    wait, and the unmount said they go out on the next mount, which a session archived
    refuses (a helper). It says the server refuses the key, and the way out."""
    sdk = server.sdk()
    store = sdk.beta.memory_stores.create(name="Kept").id
    sid = make_session(sdk, [{"type": "memory_store", "memory_store_id": store}])
    m = mounts.mount_group("--session", sid, args=("--write-back-delay", "600"))
    (m.path / "kept" / "late.md").write_text("written before the archive\n")
    sdk.beta.sessions.archive(sid)
    out = m.unmount("--timeout", "3", kept=True)
    assert "change(s) stay journaled and go out on the next mount (session " in out, out
    assert "the server refuses this mount's key: they go out with a mount whose key it " \
        "takes" in out, out
    plain = mounts.mount(store)
    plain.wait_synced()
    assert server_memories(server, store) == {"/late.md": "written before the archive\n"}
