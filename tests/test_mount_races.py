"""Races and refusals through real mounts (issue 7's defects 1-5, 10, 11).

Every test that claims an in-flight window opens it with `memfs serve`'s
request gate (tests/gate.py) and asserts the request is held — applied or
not, as the test says — before it acts, then releases it. Nothing here
sleeps to "probably" hit a window.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import pytest

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
from gate import Gate
from mountutil import mounts, needs_fuse, server_memories  # noqa: F401
from synchelpers import cat, conflicts, flush, sdk_by_path, sdk_update, versions, wait_for, xattr

from memfs.local import control

pytestmark = [pytest.mark.mount, needs_fuse]


def live_status(m) -> dict:
    """The daemon's status over its control socket, in this process (no fork)."""
    return control.request(m.state_dir, {"cmd": "status"})["status"]


def memory_id(path) -> str:
    mid = xattr(path, "user.memfs.memory_id")
    assert mid, f"{path} has no memory yet"
    return mid


def update_rule(store: str, mid: str) -> str:
    """The URL path of an update (POST) of one memory."""
    return rf"/memory_stores/{store}/memories/{mid}$"


def editor_save(path, content: str) -> None:
    """What vim/VS Code do: write a temp file, then rename it over the target."""
    tmp = path.with_name(path.name + ".tmp-save")
    tmp.write_text(content)
    os.rename(tmp, path)


def contents_of(m, store_conflicts: list[dict]) -> set[str]:
    return {c["local_content"] for c in store_conflicts}


# -- defect 1: an editor save while the previous upload is in flight -------------------------


def test_editor_save_while_update_in_flight_keeps_id_and_newest(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    x = m.path / "x.md"
    x.write_text("v1\n")
    m.wait_synced()
    mid = memory_id(x)
    with Gate(server) as gate:
        gate.hold("POST", update_rule(store, mid), when="after", count=1)
        x.write_text("v2\n")
        [held] = gate.wait_held(1)          # v2 is committed; its answer is on the wire
        assert held["status"] == 200
        assert sdk_by_path(server, store)["/x.md"].id == mid
        editor_save(x, "v3 newest\n")       # the save lands inside the window
        assert gate.held(), "the update must still be in flight when the save happened"
        gate.release()
    m.wait_synced()
    assert cat(x) == "v3 newest\n"
    remote = server_memories(server, store)
    assert remote == {"/x.md": "v3 newest\n"}
    assert sdk_by_path(server, store)["/x.md"].id == mid     # history kept: one memory
    assert [v.content for v in versions(server, store, mid)][:3] == [
        "v3 newest\n", "v2\n", "v1\n"]
    assert conflicts(m) == []
    assert m.status()["pending"]["deletes"] == []


def test_editor_save_during_unmount_flush_keeps_the_memory(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "30")
    x = m.path / "x.md"
    x.write_text("v1\n")
    flush(m)
    mid = memory_id(x)
    with Gate(server) as gate:
        gate.hold("POST", update_rule(store, mid), when="after", count=1)
        x.write_text("v2\n")
        unmount = subprocess.Popen(
            [sys.executable, "-m", "memfs", "unmount", str(m.path), "--timeout", "60"],
            env=m.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            gate.wait_held(1)                # the flush's update of v2 is on the wire
            editor_save(x, "v3 during flush\n")
            assert gate.held()
            gate.release()
            out, err = unmount.communicate(timeout=90)
        finally:
            if unmount.poll() is None:
                unmount.kill()
    assert unmount.returncode == 0, err
    assert re.search(r"pushed \d+ change\(s\), 0 left", out), out
    m._wait_pid()
    assert server_memories(server, store) == {"/x.md": "v3 during flush\n"}
    assert sdk_by_path(server, store)["/x.md"].id == mid   # not deleted and re-created


# -- defect 2: one refused request never blocks the others --------------------------------------


def test_refused_delete_waits_alone_while_everything_else_goes_out(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    for name in ("a.md", "b.md"):
        (m.path / name).write_text(f"{name} v1\n")
    m.wait_synced()
    mid_a = memory_id(m.path / "a.md")
    with Gate(server) as gate:
        gate.refuse("DELETE", rf"/memories/{mid_a}$", 403)
        (m.path / "a.md").unlink()
        wait_for(lambda: gate.snapshot()["rules"][0]["caught"] >= 1, what="the 403")
        (m.path / "b.md").write_text("b.md v2\n")
        (m.path / "c.md").write_text("c.md new\n")
        wait_for(lambda: server_memories(server, store).get("c.md") is None
                 and server_memories(server, store).get("/c.md") == "c.md new\n"
                 and server_memories(server, store).get("/b.md") == "b.md v2\n",
                 what="the other changes on the server")
        [delete] = m.status()["pending"]["deletes"]
        assert "PermissionDenied" in delete["error"]
        assert "failing: delete /a.md" in m.memfs("status", str(m.path)).stdout
        out = m.unmount("--timeout", "10", kept=True)  # does not crash the daemon
        assert re.search(r"1 left", out), out
    assert set(server_memories(server, store)) == {"/a.md", "/b.md", "/c.md"}


def test_a_new_file_where_a_delete_met_their_edit_is_a_conflict_saying_so(mounts, server):
    """a.md removed here; its DELETE is held at the gate while another writer edits a.md
    and the user makes a new a.md (the DELETE is out: the new file cannot take the memory
    back). The DELETE meets their edit (409): their a.md wins the path, the new file is
    kept as a conflict, and `memfs conflicts` says why: deleted here but changed on the
    server (it said another writer had created the same path). `memfs unmount` names it
    and exits with status 3: what the user wrote is not on the server."""
    store = mounts.new_store()
    m = mounts.mount(store, "--delete-delay", "0")
    (m.path / "a.md").write_text("v1\n")
    m.wait_synced()
    mid = memory_id(m.path / "a.md")
    with Gate(server) as gate:
        gate.hold("DELETE", rf"/memories/{mid}$", when="before", count=1)
        (m.path / "a.md").unlink()
        [held] = gate.wait_held(1)
        sdk_update(server, store, mid, content="theirs\n")
        (m.path / "a.md").write_text("mine\n")
        gate.release(held["seq"])
    flush(m)
    wait_for(lambda: conflicts(m), what="the conflict")
    [row] = conflicts(m)
    assert (row["path"], row["reason"], row["local_content"]) == (
        "/a.md", "deleted here but changed on the server", "mine\n")
    assert cat(m.path / "a.md") == "theirs\n"
    assert server_memories(server, store) == {"/a.md": "theirs\n"}
    assert sdk_by_path(server, store)["/a.md"].id == mid
    out = m.unmount(kept=True)      # exit status 3: "mine" is not on the server
    assert ("1 conflict(s) keep what was written here aside, NOT on the server" in out
            and f"#{row['id']} /a.md: deleted here but changed on the server" in out), out
    assert "1 conflict(s) keep what was written here aside" in (
        m.state_dir / "daemon.log").read_text()


def test_refused_update_is_reported_on_the_file_and_retried(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    (m.path / "a.md").write_text("a1\n")
    m.wait_synced()
    mid = memory_id(m.path / "a.md")
    with Gate(server) as gate:
        gate.refuse("POST", update_rule(store, mid), 403)
        (m.path / "a.md").write_text("a2\n")
        (m.path / "other.md").write_text("goes out\n")
        wait_for(lambda: xattr(m.path / "a.md") == "error", what="error state on a.md")
        assert "refused" in xattr(m.path / "a.md", "user.memfs.reason")
        # Every other change still goes out (in the same pass, concurrently: its answer
        # may come after a.md's refusal).
        wait_for(lambda: server_memories(server, store).get("/other.md") == "goes out\n",
                 what="other.md on the server while a.md is refused")
        gate.clear()
    flush(m)   # the first flush pass retries refused files at once
    assert server_memories(server, store)["/a.md"] == "a2\n"
    assert xattr(m.path / "a.md") == "synced"


# -- defect 3: restoring a conflict never destroys a newer edit ----------------------------------


def test_restore_over_a_newer_pending_edit_keeps_it(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "30", "--poll-interval", "3600")
    a = m.path / "a.md"
    a.write_text("base\n")
    flush(m)
    mid = memory_id(a)
    a.write_text("mine\n")                       # pending (write-back delay 30 s)
    sdk_update(server, store, mid, content="theirs\n")
    m.sync_now()                                 # both changed: a conflict
    [row] = conflicts(m)
    assert row["local_content"] == "mine\n" and cat(a) == "theirs\n"
    a.write_text("newer, not pushed yet\n")      # closed, still pending
    m.memfs("conflicts", "restore", str(row["id"]), "--mountpoint", str(m.path))
    assert cat(a) == "mine\n"
    rows = conflicts(m)
    assert [r["local_content"] for r in rows] == ["newer, not pushed yet\n"]
    assert "restoring conflict" in rows[0]["reason"]
    flush(m)
    assert server_memories(server, store) == {"/a.md": "mine\n"}


# -- defect 4: a pusher-side conflict respects an open, dirty buffer ----------------------------


def test_precondition_failure_waits_for_unsaved_writes(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store, "--poll-interval", "3600")
    a = m.path / "a.md"
    a.write_text("v1\n")
    m.wait_synced()
    mid = memory_id(a)
    with Gate(server) as gate:
        gate.hold("POST", update_rule(store, mid), when="before", count=1)
        a.write_text("v2 closed\n")
        gate.wait_held(1)                          # our update, not applied yet
        sdk_update(server, store, mid, content="theirs\n")  # it will fail its precondition
        # No subprocess may run while f is open: a fork+exec closes the inherited
        # descriptor, and every close of a descriptor is a FUSE flush (a save).
        f = open(a, "r+")  # noqa: SIM115 - closed below
        try:
            f.write("v3")                          # unsaved writes in the daemon
            f.flush()
            assert gate.held()
            gate.release()
            wait_for(lambda: "unsaved writes" in (live_status(m)["pending"]["updates"]
                                                  or [{}])[0].get("error", ""),
                     what="the pusher deferring to the open writer")
            assert live_status(m)["conflicts"] == []   # nothing settled under the writer
            assert server_memories(server, store) == {"/a.md": "theirs\n"}
        finally:
            f.close()
    flush(m)
    # Server wins the tree; what the writer closed is kept as a conflict, never pushed
    # over the server's change with a fresh precondition.
    assert server_memories(server, store) == {"/a.md": "theirs\n"}
    assert cat(a) == "theirs\n"
    assert [r["local_content"] for r in conflicts(m)] == ["v3 closed\n"]


# -- defect 5: absent from one listing is not deleted --------------------------------------------


@pytest.mark.parametrize("dirty", [False, True], ids=["clean", "dirty"])
def test_rename_between_listing_pages_is_not_a_delete(mounts, server, dirty):
    store = mounts.new_store()
    client = server.sdk()
    for i in range(100):  # fills the first page (100 a page): /p000 ... /p099
        client.beta.memory_stores.memories.create(store, path=f"/p{i:03}.md", content=f"{i}\n")
    z = client.beta.memory_stores.memories.create(store, path="/z.md", content="zed\n")
    m = mounts.mount(store, "--poll-interval", "3600", "--no-prefetch",
                     "--write-back-delay", "3600")
    assert cat(m.path / "z.md") == "zed\n"
    if dirty:
        (m.path / "z.md").write_text("zed, edited here\n")
    with Gate(server) as gate:
        gate.hold("GET", rf"/memory_stores/{store}/memories$", when="after", count=1)
        syncing = threading.Thread(target=lambda: m.sync_now(full=True))
        syncing.start()
        try:
            gate.wait_held(1)                       # page 1 computed, not delivered
            sdk_update(server, store, z.id, path="/a.md")   # moves before page 1's end
            gate.release()
        finally:
            syncing.join(60)
    assert not syncing.is_alive()
    expected = "zed, edited here\n" if dirty else "zed\n"
    assert cat(m.path / "a.md") == expected         # followed the rename
    assert not (m.path / "z.md").exists()
    flush(m)
    remote = sdk_by_path(server, store)
    assert len(remote) == 101                       # no duplicate memory
    assert remote["/a.md"].id == z.id
    assert server_memories(server, store)["/a.md"] == expected


def test_their_new_file_read_for_a_conflict_while_ours_moves_away_shows_at_the_next_poll(
        mounts, server):
    """Our c.md is not pushed yet when another writer creates c.md. A full listing meets
    theirs and reads it for the conflict; while that read is held, our c.md is renamed to
    x.md, so the conflict no longer applies (deferred). Their c.md still reaches the tree
    at the next poll, which reads it again (before, only the next full listing showed it,
    10 minutes on: the feed had shown it already)."""
    store = mounts.new_store()
    m = mounts.mount(store, "--poll-interval", "3600", "--no-prefetch",
                     "--write-back-delay", "3600")
    (m.path / "c.md").write_text("ours\n")
    theirs = server.sdk().beta.memory_stores.memories.create(store, path="/c.md",
                                                             content="theirs\n")
    with Gate(server) as gate:
        gate.hold("GET", rf"/memory_stores/{store}/memories/{theirs.id}$", count=1)
        syncing = threading.Thread(target=lambda: m.sync_now(full=True))
        syncing.start()
        try:
            gate.wait_held(1)                       # their c.md read for the conflict
            os.rename(m.path / "c.md", m.path / "x.md")
            gate.release()
        finally:
            syncing.join(60)
    assert not syncing.is_alive()
    m.sync_now()                                    # a poll of the feed
    assert cat(m.path / "c.md") == "theirs\n"
    assert cat(m.path / "x.md") == "ours\n"
    assert conflicts(m) == []
    flush(m)
    assert server_memories(server, store) == {"/c.md": "theirs\n", "/x.md": "ours\n"}


# -- defects 10 and 11: the unmount flush keeps going, and reports exactly ------------------------


@pytest.mark.parametrize("faults", [
    {"rate_429": 0.5, "retry_after": 0.2},
    {"rate_429": 0.2, "retry_after": 0.2, "error_rate": 0.2, "drop_rate": 0.1},
], ids=["429s", "mixed"])
def test_unmount_flush_pushes_everything_under_faults(mounts, server, faults):
    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "3600")
    expected = {f"/n{i:02}.md": f"note {i}\n" for i in range(40)}
    for path, content in expected.items():
        (m.path / path[1:]).write_text(content)
    server.set_faults(**faults)
    try:
        out = m.unmount("--timeout", "120")
    finally:
        server.clear_faults()
    assert re.search(r"pushed 40 change\(s\), 0 left", out), out
    assert server_memories(server, store) == expected


def test_unmount_waits_for_the_request_in_flight_and_counts_it(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store)
    a = m.path / "a.md"
    a.write_text("v1\n")
    m.wait_synced()
    mid = memory_id(a)
    with Gate(server) as gate:
        gate.hold("POST", update_rule(store, mid), when="after", count=1)
        a.write_text("v2\n")
        gate.wait_held(1)                    # the background pusher's update is committed
        unmount = subprocess.Popen(
            [sys.executable, "-m", "memfs", "unmount", str(m.path)], env=m.env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert gate.held() and unmount.poll() is None
            gate.release()
            out, err = unmount.communicate(timeout=60)
        finally:
            if unmount.poll() is None:
                unmount.kill()
    assert unmount.returncode == 0, err
    assert "0 left" in out, out
    m._wait_pid()
    status = m.status()                      # from state.db: nothing was left behind
    assert status["running"] is False
    assert not any(status["pending"][k] for k in ("creates", "updates", "renames", "deletes"))
    assert server_memories(server, store) == {"/a.md": "v2\n"}


def test_unmount_with_the_server_down_reports_exactly_what_is_left(mounts, server):
    store = mounts.new_store()
    m = mounts.mount(store, "--write-back-delay", "3600")
    for i in range(3):
        (m.path / f"f{i}.md").write_text(f"{i}\n")
    server.stop()
    out = m.unmount("--timeout", "3", kept=True)
    assert re.search(r"pushed 0 change\(s\), 3 left", out), out
    status = m.status()
    assert [c["path"] for c in status["pending"]["creates"]] == ["/f0.md", "/f1.md", "/f2.md"]
