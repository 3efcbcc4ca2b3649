"""Edges of `memfs mount` a user hits: a non-empty mountpoint (refused unless
--allow-non-empty, in plain, session and --all mounts alike) and a second mount of a
session whose stores are all mounted already (refused, even with --allow-partial)."""

from __future__ import annotations

import os
import time

import pytest
from mountutil import MountProc, mount_env, needs_fuse, server_memories

pytestmark = [needs_fuse, pytest.mark.mount, pytest.mark.timeout(180)]


def test_a_non_empty_mountpoint_is_refused_unless_asked(server, mounts, tmp_path):
    store = mounts.new_store("Notes")
    cli = MountProc(tmp_path, "", mount_env(server, tmp_path), ())
    sid = cli.memfs("sessions", "create", "--store", store).stdout.split()[-1]
    for name, select in (("plain", (store,)), ("session", ("--session", sid)),
                         ("all", ("--all",))):
        point = tmp_path / name
        point.mkdir()
        (point / "mine.txt").write_text("mine\n")
        proc = cli.memfs("mount", *select, str(point), check=False)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.strip() == (
            f"Error: {point} is not empty (1 entry: mine.txt): a mount would hide them until "
            "unmounted; use an empty directory, or --allow-non-empty"), proc.stderr
        assert not os.path.ismount(point)
        assert (point / "mine.txt").read_text() == "mine\n"
    m = mounts.mount(store, "--allow-non-empty", name="plain")
    assert os.path.ismount(m.path) and os.listdir(m.path) == []
    m.unmount()
    assert (m.path / "mine.txt").read_text() == "mine\n"  # back once unmounted
    g = mounts.mount_group("--session", sid, args=("--allow-non-empty",), name="session")
    assert os.listdir(g.path) == ["notes"]
    # Empty directories hide nothing: a root whose store folders were made beforehand
    # (as /mnt/memory/<slug> in an agent's container) mounts without the flag.
    g.unmount()
    made = tmp_path / "premade"
    (made / "notes" / "sub").mkdir(parents=True)
    g2 = mounts.mount_group("--session", sid, name="premade")
    assert os.listdir(g2.path) == ["notes"]
    g2.unmount()
    (made / "notes" / "sub" / "f.txt").write_text("a file, deep down\n")
    proc = cli.memfs("mount", "--session", sid, str(made), check=False)
    assert proc.returncode == 1 and "is not empty (1 entry: notes)" in proc.stderr, proc.stderr


def test_a_second_mount_of_a_session_is_refused(server, mounts, tmp_path):
    a = mounts.new_store("A")
    b = mounts.new_store("B")
    cli = MountProc(tmp_path, "", mount_env(server, tmp_path), ())
    sid = cli.memfs("sessions", "create", "--store", a, "--store", b).stdout.split()[-1]
    first = mounts.mount_group("--session", sid, name="first")
    second = tmp_path / "second"
    second.mkdir()
    for extra in ((), ("--allow-partial",)):
        proc = cli.memfs("mount", "--session", sid, str(second), *extra, check=False)
        assert proc.returncode == 1, proc.stderr
        assert f"2 of 2 store(s) of {second} cannot be mounted" in proc.stderr
        assert f"already mounted at {first.path}/a by another memfs daemon" in proc.stderr
        assert "nothing mounted" in proc.stderr and not os.path.ismount(second)


def _wait(cond, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"no {what} after {timeout}s"
        time.sleep(0.1)


def test_unmount_names_what_stays_local_and_fails(server, mounts):
    store = mounts.new_store("Kept")
    m = mounts.mount(store)
    (m.path / "good.md").write_text("ok\n")
    (m.path / "bad.md").write_bytes(b"\xff\xfe not UTF-8\n")  # cp says nothing: exit 0
    (m.path / "notes.md~").write_text("an editor's backup\n")
    _wait(lambda: m.live_status()["pending"]["refused"], "refusal")
    out = m.unmount(kept=True)
    assert out.startswith(f"unmounted {m.path}: pushed 0 change(s), 0 left\n"), out
    assert "  1 file(s) stay here only, NOT on the server:\n    /bad.md: " in out, out
    assert "UTF-8" in out.split("/bad.md: ", 1)[1].splitlines()[0], out
    assert "  1 file(s) local-only by name (temp files, --local-only) stay here by design: " \
        "/notes.md~" in out, out
    # The refused file is still kept at the next mount; once it is gone, only the temp
    # file stays local, by design: a clean exit.
    again = mounts.mount(store, name="again")
    assert (again.path / "bad.md").read_bytes() == b"\xff\xfe not UTF-8\n"
    (again.path / "bad.md").unlink()
    again.wait_synced()
    out = again.unmount()
    assert "NOT on the server" not in out and "stay here by design: /notes.md~" in out, out


def test_a_session_root_unmount_names_the_store_of_each_kept_file(server, mounts):
    store = mounts.new_store("Team")
    g = mounts.mount_group("--all")
    (g.path / "team" / "bad.md").write_bytes(b"\xc3\x28\n")
    _wait(lambda: g.live_status()["stores"][0]["pending"]["refused"], "refusal")
    out = g.unmount(kept=True)
    assert "  1 file(s) stay here only, NOT on the server:\n    /team/bad.md: " in out, out
    assert server.sdk().beta.memory_stores.memories.list(store).data == []


def test_serve_stop_refuses_under_live_mounts_and_they_follow_a_restart(tmp_path):
    """`memfs serve stop` names the mounts that use the embedded server and refuses;
    --force stops it; another command starts it again (a new port) and the mount finds
    it at its next poll (--poll-interval 0.5), pushing what was written meanwhile."""
    from test_mount_statedir import Embedded

    embedded = Embedded(tmp_path)
    path = tmp_path / "mnt"
    path.mkdir()
    m = MountProc(path, "", embedded.env, ("--write-back-delay", "0.1",
                                           "--poll-interval", "0.5",
                                           "--lost-answer-wait", "1"))  # a cut request
    try:
        m.store_id = m.memfs("stores", "create", "emb").stdout.split()[-1]
        first = embedded.info()
        m.mount()
        refused = m.memfs("serve", "stop", check=False)
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.strip() == (
            f"Error: the embedded server ({first['url']}) serves 1 live mount(s): {path}; "
            "unmount them first (memfs unmount), or --force (they go offline and catch up "
            "when it runs again)")
        assert embedded.sdk().beta.memory_stores.retrieve(m.store_id).id == m.store_id
        assert m.memfs("serve", "stop", "--force").stdout.startswith("stopped (pid ")
        (path / "a.md").write_text("written while it was stopped\n")
        _wait(lambda: m.live_status()["online"] is False, "offline status")
        m.memfs("stores", "list")  # any command starts the embedded server again
        second = embedded.info()
        assert second["url"] != first["url"]
        _wait(lambda: m.live_status()["online"], "the mount back online")
        m.wait_synced()
        assert m.status()["server"] == second["url"]
        memories = embedded.sdk().beta.memory_stores.memories.list(m.store_id, view="full")
        assert {x.path: x.content for x in memories} == {"/a.md": "written while it was stopped\n"}
        out = m.unmount()
        assert "pushed" in out
        assert m.memfs("serve", "stop").stdout.startswith("stopped (pid ")  # no mount left
    finally:
        m.cleanup()
        embedded.cleanup()


def test_a_store_mounted_elsewhere_names_that_mountpoint(server, mounts, tmp_path):
    store = mounts.new_store("Once")
    first = mounts.mount(store, name="first")
    second = tmp_path / "second"
    second.mkdir()
    proc = first.memfs("mount", store, str(second), check=False)
    assert proc.returncode == 1 and not os.path.ismount(second)
    assert proc.stderr.strip() == (f"Error: store Once ({store}) is already mounted at "
                                   f"{first.path} by another memfs daemon"), proc.stderr


def test_a_server_started_again_on_its_port_is_seen_at_the_next_poll(server, mounts):
    """Nothing listening is probed at every poll, not after a growing backoff (up to
    10 s at --poll-interval 0.5): the mount is online again as soon as the server is."""
    store = mounts.new_store("Back")
    m = mounts.mount(store, "--poll-interval", "0.5", "--lost-answer-wait", "1")
    server.stop()
    _wait(lambda: m.live_status()["online"] is False, "offline status")
    (m.path / "while-down.md").write_text("queued\n")
    time.sleep(3)  # failed probes: an exponential backoff would have grown
    server.start()  # the same port
    _wait(lambda: m.live_status()["online"], "the mount back online")
    m.wait_synced()
    assert server_memories(server, store) == {"/while-down.md": "queued\n"}


def test_a_sync_answers_once_the_kernel_knows(mounts, server):
    """`memfs sync` (and `memfs mcp --mount` after a change) answers once the kernel has
    been told what the pass changed: a name looked up as missing just before, created
    on the server, is there at once after the sync (`memfs mcp --mount` created a file,
    then `cat` failed: CI, 6 December)."""
    from synchelpers import sdk_create

    store = mounts.new_store()
    m = mounts.mount(store, "--no-feed", "--poll-interval", "3600")
    for i in range(20):
        name = m.path / f"n{i}.md"
        assert not name.exists()  # the kernel caches the name as missing
        sdk_create(server, store, f"/n{i}.md", f"{i}\n")
        m.sync_now()
        assert name.exists(), i
    m.unmount()
