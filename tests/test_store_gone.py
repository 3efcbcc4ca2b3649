"""A store archived or deleted on the server under a plain mount or a session root (real
mounts, a real `memfs serve`, the official SDK as the other client). `--all` learns it
from its store listing (tests/test_group_mount.py); these mounts learn it from the first
request the server refuses, then read the store: the directory turns read-only, and what
was written there and no server will take is named at unmount, with the command that
writes it out (`memfs salvage`). Before (found by a helper, 6 December), such a mount took
every write, the server refused each push, and the unmount said the changes would go out
on the next mount."""

from __future__ import annotations

import re
import time

import pytest
from conftest import start_server
from mountutil import Mounts, needs_fuse, refuses_writes, server_memories
from test_cli_errors import NOT_THE_API, fake_server

pytestmark = needs_fuse


def _wait(pred, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.parametrize("how", ["archived", "deleted"])
def test_a_store_gone_under_a_plain_mount_turns_read_only_and_names_the_way_out(
        server, mounts, how, tmp_path):
    sdk = server.sdk()
    store = sdk.beta.memory_stores.create(name="Going").id
    m = mounts.mount(store)
    (m.path / "a.md").write_text("synced\n")
    m.wait_synced()
    (sdk.beta.memory_stores.archive if how == "archived" else sdk.beta.memory_stores.delete)(
        store)
    (m.path / "late.md").write_text("written after\n")  # taken: nothing told the mount yet
    _wait(lambda: refuses_writes(m.path), what=f"the {how} store to turn read-only")
    assert (m.path / "late.md").read_text() == "written after\n"  # kept, readable
    status = m.memfs("status", str(m.path)).stdout
    assert f"online (read-only: the store was {how} on the server)" in status, status
    journal = str(m.state_dir)
    out = m.unmount(kept=True)
    assert f"the store was {how} on the server" in out, out
    assert f"`memfs salvage {journal} DIR` writes its files out" in out, out
    assert "go out on the next mount" not in out and "tried again on the next mount" \
        not in out, out
    m.memfs("salvage", journal, str(tmp_path / "out"))
    assert (tmp_path / "out" / "late.md").read_text() == "written after\n"
    if how == "archived":
        assert server_memories(server, store) == {"/a.md": "synced\n"}
    else:  # mounting it again can only point at the journal
        again = m.memfs("mount", store, str(m.path), check=False)
        assert again.returncode == 1, again
        assert f"; its journal from the last mount at {m.path} ({journal}) holds " in \
            again.stderr, again.stderr
        assert f"`memfs salvage {journal} DIR` writes its files out" in again.stderr


def test_a_store_archived_before_the_mount_is_mounted_read_only(server, mounts):
    sdk = server.sdk()
    store = sdk.beta.memory_stores.create(name="Old").id
    sdk.beta.memory_stores.memories.create(store, path="/a.md", content="kept\n")
    sdk.beta.memory_stores.archive(store)
    m = mounts.mount(store)
    assert "is archived: the server refuses changes to it; mounting it read-only" in \
        m.outputs[-1].stderr, m.outputs[-1].stderr
    assert m.outputs[-1].stdout.rstrip().endswith("(read-only)"), m.outputs[-1].stdout
    assert (m.path / "a.md").read_text() == "kept\n"
    assert refuses_writes(m.path)
    _wait(lambda: "the store was archived on the server" in m.memfs("status", str(m.path)).stdout,
          what="status to say why")
    m.unmount()


def test_a_store_archived_under_a_session_root_turns_read_only(server, mounts):
    """A session keeps an archived store attached; its directory under the root stops
    taking writes once the server refuses one, and the other store goes on."""
    from test_session_mount import make_session

    sdk = server.sdk()
    going = sdk.beta.memory_stores.create(name="Going").id
    staying = sdk.beta.memory_stores.create(name="Staying").id
    sid = make_session(sdk, [{"type": "memory_store", "memory_store_id": going},
                             {"type": "memory_store", "memory_store_id": staying}])
    m = mounts.mount_group("--session", sid)
    sdk.beta.memory_stores.archive(going)
    (m.path / "going" / "late.md").write_text("written after\n")
    _wait(lambda: refuses_writes(m.path / "going"), what="the archived store to turn read-only")
    (m.path / "staying" / "b.md").write_text("b\n")
    m.wait_synced()
    assert server_memories(server, staying) == {"/b.md": "b\n"}
    out = m.unmount(kept=True)
    assert "the store was archived on the server" in out and "memfs salvage" in out, out
    # Mounted again, the session's archived store is read-only from the start (it took a
    # write first before: found by a helper).
    m.mount()
    _wait(lambda: {s["name"]: s["gone"] for s in m.live_status()["stores"]}["going"]
          == "archived", what="the archived store read at start")
    assert refuses_writes(m.path / "going")
    # Its daemon killed, the unmount that clears the root names the store its journal
    # holds changes of (it did not: a helper, 6 December).
    m._sigkill()
    out = m.memfs("unmount", str(m.path), check=False)
    assert out.returncode == 3, (out.returncode, out.stdout, out.stderr)
    assert re.search(r"\n  Going: [12] change\(s\) written there are NOT on the server",
                     out.stdout), out.stdout


def test_a_gone_store_is_still_named_so_once_its_daemon_died(server, mounts):
    """The mount learned the store was deleted, then its daemon died (SIGKILL): the
    status read from state.db and the unmount that clears the dead mount say what the
    live daemon said (no mount sends the journal: `memfs salvage`), not that the
    changes go out on the next mount. Before, state.db did not record it."""
    sdk = server.sdk()
    store = sdk.beta.memory_stores.create(name="Dies").id
    m = mounts.mount(store)
    (m.path / "a.md").write_text("synced\n")
    m.wait_synced()
    sdk.beta.memory_stores.delete(store)
    (m.path / "late.md").write_text("written after\n")
    _wait(lambda: refuses_writes(m.path), what="the deleted store to turn read-only")
    journal = str(m.state_dir)
    m._sigkill()  # the mount stays, dead: `memfs unmount` clears it
    status = m.memfs("status", str(m.path)).stdout
    assert "daemon: not running (from state.db); the store was deleted on the server: " \
        f"no mount sends what its journal holds (memfs salvage {journal} DIR" in status, status
    assert "late.md: the store was deleted on the server: not on the server" in status, status
    out = m.memfs("unmount", str(m.path), check=False)
    assert out.returncode == 3, (out.returncode, out.stdout, out.stderr)
    assert "the daemon was gone; cleared the stale mount" in out.stdout, out.stdout
    # late.md (and the probe, when the store turned read-only between its write and
    # its unlink): counted, and named by the status above
    assert re.search(r"\n  [12] change\(s\) written there are NOT on the server \(memfs "
                     "status ", out.stdout), (status, out.stdout)
    assert f"`memfs salvage {journal} DIR` writes its files out" in out.stdout, out.stdout
    assert "next mount" not in out.stdout, out.stdout


def test_a_web_server_in_the_servers_place_is_no_store_deleted(tmp_path):
    """A 404 that is not the API's (a web server on the port, a balancer between
    deploys) says nothing of the store: the mount goes offline and comes back when the
    server does. Before (found by a helper, 6 December), it took the page for its store
    deleted and stayed read-only until remounted."""
    sp = start_server(tmp_path / "own", api_key="own-key")
    ms = Mounts(sp, tmp_path)
    try:
        store = ms.new_store("Stays")
        m = ms.mount(store, "--poll-interval", "0.2")
        (m.path / "a.md").write_text("synced\n")
        m.wait_synced()
        port = sp.port
        sp.stop()
        hits: list[str] = []
        with fake_server(404, "text/html", NOT_THE_API, port=port, hits=hits):
            (m.path / "b.md").write_text("written while a web page answers\n")
            _wait(lambda: f"GET /v1/memory_stores/{store}" in hits
                  and any(h.startswith("POST ") for h in hits),
                  what="the push and the store's read to meet the page")
            assert not refuses_writes(m.path)
            status = m.memfs("status", str(m.path)).stdout
            assert "read-only" not in status and "deleted" not in status, status
            assert "not the Memory Stores API" in status, status
        sp.start()  # the server back on its port: the mount catches up
        m.wait_synced()
        assert server_memories(sp, store) == {"/a.md": "synced\n",
                                              "/b.md": "written while a web page answers\n"}
        m.unmount()
    finally:
        ms.cleanup()
        sp.stop()


def test_what_a_gone_store_keeps_is_not_said_to_go_out_or_come_back():
    """A store archived or deleted on the server: its unmount does not say that the
    changes it turned down are "tried again on the next mount", nor that `memfs
    conflicts restore` puts a conflict back (no mount pushes either): `memfs salvage`."""
    from memfs.state.report import kept_here

    reply = {"waiting": [{"path": "/w.md", "reason": "403"}],
             "conflicts": [{"id": 1, "path": "/c.md", "reason": "changed on both"}]}
    live = dict(kept_here(reply))
    assert "tried again on the next mount" in " ".join(live)
    assert any("memfs conflicts restore" in sentence for sentence in live)
    gone = dict(kept_here({**reply, "gone": "deleted"}))
    assert list(gone.values()) == list(live.values())
    assert not any("next mount" in s or "restore" in s for s in gone), gone
    assert "1 conflict(s) keep what was written here aside, NOT on the server (memfs " \
           "salvage writes each out, under .conflicts/)" in gone
