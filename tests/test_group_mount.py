"""`memfs mount --all ROOT`: several stores under one FUSE mount (memfs/mount/router.py),
through a real mount against a real `memfs serve`. Session mounts (`--session`) are
in test_session_mount.py; both share the group daemon tested here."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import subprocess
import time

import pytest
from gate import Gate
from mountutil import (
    errno_of,
    needs_fuse,
    refuses_writes,
    server_memories,
    strand_under_url_key,
)
from synchelpers import wait_for
from test_services import memfs_wrapper, mount_helper_installed  # noqa: F401 - a fixture

pytestmark = needs_fuse


def _wait(pred, timeout: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_all_root_view_marker_and_access(server, mounts):
    sdk = server.sdk()
    a = sdk.beta.memory_stores.create(name="User Preferences").id
    b = sdk.beta.memory_stores.create(name="Project Notes!").id
    c = sdk.beta.memory_stores.create(name="user  preferences").id  # the same slug as a
    sdk.beta.memory_stores.memories.create(a, path="/style.md", content="terse\n")
    sdk.beta.memory_stores.memories.create(b, path="/todo/next.md", content="ship it\n")
    archived = sdk.beta.memory_stores.create(name="Old").id
    sdk.beta.memory_stores.archive(archived)

    m = mounts.mount_group("--all")
    root = m.path
    # The view: one directory per non-archived store, by slug, oldest store first.
    assert sorted(os.listdir(root)) == ["project-notes", "user-preferences",
                                        "user-preferences-2"]
    assert (root / "user-preferences" / "style.md").read_text() == "terse\n"
    assert (root / "project-notes" / "todo" / "next.md").read_text() == "ship it\n"
    # The marker: the SDK's format exactly, read-only, in every store's listing.
    for name, sid in (("user-preferences", a), ("project-notes", b),
                      ("user-preferences-2", c)):
        marker = root / name / ".anthropic-memory-store"
        assert marker.read_bytes() == f"version 1\n{sid}".encode()
        assert ".anthropic-memory-store" in os.listdir(root / name)
        assert errno_of(lambda p=marker: p.write_text("x")) == errno.EROFS
        assert errno_of(lambda p=marker: p.unlink()) == errno.EROFS
        assert errno_of(lambda p=marker: os.rename(p, p.with_name("m"))) == errno.EROFS
    # The root refuses every change.
    assert errno_of(lambda: (root / "new.md").write_text("x")) == errno.EROFS
    assert errno_of(lambda: (root / "newdir").mkdir()) == errno.EROFS
    assert errno_of(lambda: os.rename(root / "project-notes", root / "p")) == errno.EROFS
    assert errno_of(lambda: os.rmdir(root / "project-notes")) == errno.EROFS
    # A read-write store takes writes; they reach that store only, never the marker.
    (root / "user-preferences-2" / "note.md").write_text("third\n")
    (root / "project-notes" / "todo" / "next.md").write_text("shipped\n")
    m.wait_synced()
    assert server_memories(server, c) == {"/note.md": "third\n"}
    assert server_memories(server, b) == {"/todo/next.md": "shipped\n"}
    assert server_memories(server, a) == {"/style.md": "terse\n"}
    # A move between stores is a copy and a delete (EXDEV underneath), like two disks.
    assert errno_of(lambda: os.rename(root / "project-notes" / "todo" / "next.md",
                                       root / "user-preferences" / "next.md")) == errno.EXDEV
    subprocess.run(["mv", str(root / "project-notes" / "todo" / "next.md"),
                    str(root / "user-preferences" / "next.md")], check=True,
                   capture_output=True)
    m.wait_synced()
    assert server_memories(server, a)["/next.md"] == "shipped\n"
    # Status reports each store.
    st = m.status()
    assert st["group"] and st["kind"] == "all"
    assert [s["name"] for s in st["stores"]] == ["user-preferences", "project-notes",
                                                 "user-preferences-2"]
    assert all(s["online"] for s in st["stores"])
    text = m.memfs("status", str(root)).stdout
    assert "[project-notes]" in text and "[user-preferences-2]" in text


def test_all_root_new_store_appears_archived_turns_read_only(server, mounts):
    sdk = server.sdk()
    first = sdk.beta.memory_stores.create(name="First").id
    m = mounts.mount_group("--all")
    assert os.listdir(m.path) == ["first"]
    later = sdk.beta.memory_stores.create(name="Later On").id
    sdk.beta.memory_stores.memories.create(later, path="/hello.md", content="hi\n")
    _wait(lambda: "later-on" in os.listdir(m.path), what="the new store")
    assert _wait(lambda: (m.path / "later-on" / "hello.md").exists()
                 and (m.path / "later-on" / "hello.md").read_text(), what="its memory") == "hi\n"
    (m.path / "first" / "a.md").write_text("a\n")
    m.wait_synced()
    sdk.beta.memory_stores.archive(first)

    _wait(lambda: refuses_writes(m.path / "first", "b.md"),
          what="the archived store to turn read-only")
    assert (m.path / "first" / "a.md").read_text() == "a\n"  # still readable
    (m.path / "later-on" / "c.md").write_text("c\n")  # the other store is untouched
    m.wait_synced()
    assert server_memories(server, later)["/c.md"] == "c\n"


def test_unmount_says_a_deleted_stores_changes_no_mount_will_send(server, mounts):
    """A store deleted on the server while mounted (`--all`): its directory turns
    read-only and what it journaled stays here. The unmount said those changes "go out
    on the next mount", which none does (found by a helper, 6 December); it now says
    where they are, that no mount sends them, and the command that writes them out
    (`memfs salvage`)."""
    sdk = server.sdk()
    doomed = sdk.beta.memory_stores.create(name="Doomed").id
    m = mounts.mount_group("--all", args=("--write-back-delay", "300"))
    (m.path / "doomed" / "l.md").write_text("only here\n")
    sdk.beta.memory_stores.delete(doomed)

    _wait(lambda: refuses_writes(m.path / "doomed"), what="the deleted store to turn read-only")
    journal = next(s["state_dir"] for s in m.registry()["stores"] if s["store_id"] == doomed)
    out = m.unmount(kept=True)
    assert "the store was deleted on the server" in out and "no mount will send" in out, out
    assert "go out on the next mount" not in out, out
    # The way out it names: the journal's files written where the user says.
    assert f"memfs salvage {journal} DIR" in out, out
    dest = m.path.parent / "salvaged"
    done = m.memfs("salvage", journal, str(dest))
    assert (dest / "l.md").read_text() == "only here\n"
    assert "/l.md: not yet created on the server" in done.stdout, done.stdout
    # The root mounted again: the store is gone from it, its journal is still said.
    m.mount()
    assert f"memfs: {m.path}/doomed is not mounted now (its store was deleted on the " \
        f"server, or is no longer in the session), and its journal ({journal}) holds 1 " \
        "change(s) not on the server" in m.outputs[-1].stderr, m.outputs[-1].stderr
    assert not (m.path / "doomed").exists()
    m.unmount()
    # A new store given its name takes its directory: the journal is still said (a
    # reviewer found it was not).
    sdk.beta.memory_stores.create(name="Doomed")
    m.mount()
    assert f"its journal ({journal}) holds 1 change(s) not on the server" in \
        m.outputs[-1].stderr, m.outputs[-1].stderr
    assert (m.path / "doomed").is_dir()
    m.unmount()


def test_all_root_adopts_url_keyed_state_at_mount_and_for_a_later_store(server, mounts):
    """State an older memfs left under the URL key is adopted by `--all`: for the stores
    it plans at mount, and for a store its watch finds later; both pending changes
    reach the server."""
    sdk = server.sdk()
    first = sdk.beta.memory_stores.create(name="First").id
    old_first, new_first = strand_under_url_key(mounts, server, first)
    with Gate(server) as gate:
        m = mounts.mount_group("--all")
        assert f"from an earlier state directory {old_first} (moved to {new_first})" in \
            m.outputs[-1].stderr
        # The watch's next listing waits until the later store has its old state.
        gate.hold("GET", r"/v1/memory_stores$")
        gate.wait_held(1)
        later = sdk.beta.memory_stores.create(name="Later").id
        old_later, new_later = strand_under_url_key(mounts, server, later)
        gate.clear()
        _wait(lambda: "later" in os.listdir(m.path), 30, what="the later store")
    log = (m.state_dir / "daemon.log").read_text()
    assert f"from an earlier state directory {old_later} (moved to {new_later})" in log
    dirs = {s["store_id"]: s["state_dir"] for s in m.registry()["stores"]}
    assert dirs == {first: str(new_first), later: str(new_later)}
    assert not old_first.exists() and not old_later.exists()
    assert (m.path / "later" / "b.md").read_text() == "pending\n"
    m.wait_synced()
    assert server_memories(server, first) == {"/b.md": "pending\n"}
    assert server_memories(server, later) == {"/b.md": "pending\n"}


def test_offline_all_root_keys_a_later_store_as_its_others(server, mounts):
    """Started offline (from group.json), `--all` still knows the server's key: a store
    that appears once the server is back gets its state beside the others', not under
    the URL key."""
    sdk = server.sdk()
    sdk.beta.memory_stores.create(name="First")
    m = mounts.mount_group("--all")
    key_dir = pathlib.Path(m.registry()["stores"][0]["state_dir"]).parent
    assert key_dir.name.startswith("srv-")
    m.unmount()
    server.stop()
    m.mount()
    assert "unreachable" in m.outputs[-1].stderr
    server.start()  # on the same port
    later = server.sdk().beta.memory_stores.create(name="Later").id
    _wait(lambda: "later" in os.listdir(m.path), 30, what="the later store")
    dirs = {s["store_id"]: s["state_dir"] for s in m.registry()["stores"]}
    assert pathlib.Path(dirs[later]).parent == key_dir
    assert json.loads((m.state_dir / "group.json").read_text())["state_key"] == key_dir.name


def test_all_read_only_and_unmount_flushes_every_store(server, mounts):
    sdk = server.sdk()
    ids = [sdk.beta.memory_stores.create(name=f"Store {i}").id for i in range(3)]
    m = mounts.mount_group("--all", args=("--write-back-delay", "60"), defaults=False)
    for i in range(3):
        for j in range(5):
            (m.path / f"store-{i}" / f"n{j}.md").write_text(f"{i}-{j}\n")
    assert m.pending_total() == 15  # held by the write-back delay: the unmount flushes
    out = m.unmount()
    assert "pushed 15 change(s), 0 left" in out
    for i, sid in enumerate(ids):
        assert f"store-{i} ({sid}): pushed 5, 0 left" in out
        assert server_memories(server, sid) == {f"/n{j}.md": f"{i}-{j}\n" for j in range(5)}
    # Without a daemon, status still reports every store from its state.
    st = json.loads(m.memfs("status", str(m.path), "--json").stdout)
    assert st["group"] and not st["running"] and len(st["stores"]) == 3

    ro = mounts.mount_group("--all", args=("--read-only",), name="ro")
    assert sorted(os.listdir(ro.path)) == ["store-0", "store-1", "store-2"]
    assert (ro.path / "store-1" / "n3.md").read_text() == "1-3\n"
    assert errno_of(lambda: (ro.path / "store-1" / "x.md").write_text("x")) == errno.EROFS
    assert errno_of(lambda: (ro.path / "store-1" / "n3.md").unlink()) == errno.EROFS


def test_unmount_names_the_conflicts_of_each_store(server, mounts):
    """A create in store-1 meets another writer's memory at its path when the unmount
    flushes it: theirs wins the path, ours is kept as a conflict, and the unmount names
    it under its store's directory and exits with status 3 (what was written is not on
    the server)."""
    sdk = server.sdk()
    ids = [sdk.beta.memory_stores.create(name=f"Store {i}").id for i in range(2)]
    m = mounts.mount_group("--all", args=("--write-back-delay", "60"), defaults=False)
    (m.path / "store-1" / "a.md").write_text("mine\n")
    sdk.beta.memory_stores.memories.create(memory_store_id=ids[1], path="/a.md",
                                           content="theirs\n")
    out = m.unmount(kept=True)
    assert "1 conflict(s) keep what was written here aside, NOT on the server" in out, out
    assert " /store-1/a.md: another writer created the same path" in out, out
    assert server_memories(server, ids[1]) == {"/a.md": "theirs\n"}
    assert server_memories(server, ids[0]) == {}


def test_a_store_mounted_elsewhere_is_named_and_skipped_only_if_asked(server, mounts):
    sdk = server.sdk()
    busy = sdk.beta.memory_stores.create(name="Busy").id
    free = sdk.beta.memory_stores.create(name="Free").id
    single = mounts.mount(busy, name="single")
    root = single.path.parent / "root"
    root.mkdir()
    for select in (("--all",), ("--session", single.memfs(
            "sessions", "create", "--store", busy, "--store", free).stdout.split()[-1])):
        refused = single.memfs("mount", *select, str(root), check=False)
        assert refused.returncode == 1, refused.stderr
        assert (f"busy: store Busy ({busy}) is already mounted at {single.path} by another "
                "memfs daemon") in refused.stderr, refused.stderr
        assert "nothing mounted; --allow-partial mounts the others" in refused.stderr
        assert not os.path.ismount(root) and os.listdir(root) == []
    m = mounts.mount_group("--all", args=("--allow-partial",), env=single.env)
    assert m.outputs[-1].stdout.startswith(f"mounted every store at {m.path}: free\n")
    assert f"memfs: left out busy ({busy}): store Busy ({busy}) is already mounted at " \
        f"{single.path}" in m.outputs[-1].stderr
    assert os.listdir(m.path) == ["free"]
    st = m.status()
    assert st["skipped"] and st["skipped"][0]["store_id"] == busy
    assert "already mounted" in st["skipped"][0]["error"]
    assert "not shown" in m.memfs("status", str(m.path)).stdout
    (m.path / "free" / "ok.md").write_text("ok\n")
    m.wait_synced()
    assert server_memories(server, free) == {"/ok.md": "ok\n"}


@pytest.mark.parametrize("args, message", [
    (("--all",), "--all needs ROOT"),
    (("--all", "--session", "sesn_x", "/tmp/x"), "exclude each other"),
    (("--all", "/tmp/x", "/tmp/y"), "give only ROOT"),
    (("onlyone",), "give STORE and MOUNTPOINT"),
])
def test_group_usage_errors(server, mounts, tmp_path, args, message):
    from mountutil import MountProc, mount_env

    p = MountProc(tmp_path, "", mount_env(server, tmp_path), ())
    out = p.memfs("mount", *args, check=False)
    assert out.returncode != 0 and message in out.stderr


def as_user(user: str, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", user, "--", *cmd], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)


@pytest.fixture
def shared_dir():
    """A directory other users can reach (pytest's tmp_path is root-only)."""
    import shutil
    import tempfile

    d = tempfile.mkdtemp(prefix="memfs-shared-", dir="/tmp")
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        subprocess.run(["fusermount3", "-uz", os.path.join(d, "root")], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


def test_allow_other_lets_an_unprivileged_user_read_and_write(server, mounts, shared_dir):
    """A session mount made by root, used by the agent's user (nobody) as in a worker."""
    import pathlib
    import pwd

    nobody = pwd.getpwnam("nobody")
    sdk = server.sdk()
    sid = sdk.beta.memory_stores.create(name="Agent Notes").id
    sdk.beta.memory_stores.memories.create(sid, path="/seed.md", content="seeded\n")
    session = sdk.beta.sessions.create(agent="a", environment_id="e", resources=[
        {"type": "memory_store", "memory_store_id": sid}]).id
    root = pathlib.Path(shared_dir) / "root"
    root.mkdir()
    # Without --allow-other, FUSE denies every other user.
    plain = mounts.mount_group("--session", session, path=root)
    denied = as_user("nobody", "cat", str(root / "agent-notes" / "seed.md"))
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    plain.unmount()
    m = mounts.mount_group("--session", session, path=root,
                           args=("--allow-other", "--uid", str(nobody.pw_uid)))
    read = as_user("nobody", "cat", str(root / "agent-notes" / "seed.md"))
    assert read.returncode == 0 and read.stdout == "seeded\n", read.stderr
    wrote = as_user("nobody", "sh", "-c",
                    f"echo 'from the agent' > {root / 'agent-notes' / 'agent.md'}")
    assert wrote.returncode == 0, wrote.stderr
    assert as_user("nobody", "touch", str(root / "x")).returncode != 0  # the root: EROFS
    m.wait_synced()
    assert server_memories(server, sid)["/agent.md"] == "from the agent\n"
    assert (root / "agent-notes" / "agent.md").stat().st_uid == nobody.pw_uid


def test_allow_other_keeps_a_private_file_s_versions_private(server, mounts, shared_dir):
    """--allow-other without --uid: a file its owner made 0600 is refused to other users,
    and so is every version of it under `.memfs/versions` (they were 0644 there: any
    user read what the file's mode kept from them; a security review); a file another
    user made shows its versions to that user (0600 for the daemon's user alone shut
    them out: a review)."""
    import pathlib

    sdk = server.sdk()
    sid = sdk.beta.memory_stores.create(name="Private").id
    session = sdk.beta.sessions.create(agent="a", environment_id="e", resources=[
        {"type": "memory_store", "memory_store_id": sid}]).id
    root = pathlib.Path(shared_dir) / "root"
    root.mkdir()
    m = mounts.mount_group("--session", session, path=root, args=("--allow-other",))
    secret = root / "private" / "secret.md"
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"the secret\n")
    os.close(fd)
    (root / "private" / "shared").mkdir()
    (root / "private" / "shared").chmod(0o777)
    theirs = root / "private" / "shared" / "theirs.md"
    assert as_user("nobody", "sh", "-c", f"echo by nobody > {theirs}").returncode == 0
    m.wait_synced()
    versions = root / "private" / ".memfs" / "versions" / "secret.md"
    [version] = [versions / n for n in wait_for(lambda: os.listdir(versions))]
    assert version.read_text() == "the secret\n"  # the owner reads it
    for path in (secret, version):
        denied = as_user("nobody", "cat", str(path))
        assert denied.returncode != 0 and "Permission denied" in denied.stderr, (path, denied)
    listed = as_user("nobody", "ls", str(versions))
    assert listed.returncode != 0 and "Permission denied" in listed.stderr, listed
    assert as_user("nobody", "cat", str(root / "private" / ".anthropic-memory-store")) \
        .returncode == 0  # what is everyone's stays readable
    theirs_versions = root / "private" / ".memfs" / "versions" / "shared" / "theirs.md"
    read = as_user("nobody", "sh", "-c", f"cat {theirs_versions}/*")
    assert read.returncode == 0 and read.stdout == "by nobody\n", read.stderr
    assert theirs_versions.stat().st_uid == theirs.stat().st_uid != 0


@pytest.mark.usefixtures("mount_helper_installed")
def test_mount_helper_session_and_all_sources(server, mounts, tmp_path):
    """`mount -t memfs session:ID ROOT` and an fstab `all` line, through mount(8) and
    mount_helpers/mount.memfs, as docs/SESSIONS.md shows them."""
    import pathlib

    from mountutil import GroupMountProc, mount_env

    sdk = server.sdk()
    store = sdk.beta.memory_stores.create(name="Via Mount").id
    sid = sdk.beta.sessions.create(agent="a", environment_id="e", resources=[
        {"type": "memory_store", "memory_store_id": store}]).id
    env = {**mount_env(server, tmp_path), "MEMFS_BIN": str(memfs_wrapper(tmp_path))}
    for source, how in ((f"session:{sid}", "mount -t"), ("all", "fstab")):
        root = pathlib.Path(tmp_path / source.split(":")[0])
        root.mkdir()
        m = GroupMountProc(root, "", env, ())
        mounts.made.append(m)
        if how == "mount -t":
            cmd = ["mount", "-t", "memfs", source, str(root), "-o", "poll_interval=5"]
        else:
            fstab = tmp_path / "fstab.txt"
            fstab.write_text(f"{source}  {root}  memfs  noauto,_netdev  0 0\n")
            cmd = ["mount", "-T", str(fstab), str(root)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (cmd, out.stdout, out.stderr)
        m.pid = int(m.registry()["pid"])
        assert os.listdir(root) == ["via-mount"]
        assert m.status()["kind"] == ("session" if how == "mount -t" else "all")
        m.unmount()


def test_a_store_whose_state_cannot_open_is_skipped(server, mounts):
    """A damaged state.db costs that store only: the others mount and sync."""
    import pathlib

    sdk = server.sdk()
    bad = sdk.beta.memory_stores.create(name="Damaged").id
    good = sdk.beta.memory_stores.create(name="Fine").id
    m = mounts.mount_group("--all")
    stores = {s["store_id"]: pathlib.Path(s["state_dir"]) for s in m.registry()["stores"]}
    m.unmount()
    db = stores[bad] / "state.db"
    db.write_bytes(b"this is not a database" * 100)
    for extra in ("state.db-wal", "state.db-shm"):
        (stores[bad] / extra).unlink(missing_ok=True)
    again = mounts.mount_group("--all", args=("--allow-partial",), name="again")
    assert os.listdir(again.path) == ["fine"]
    [skipped] = again.status()["skipped"]
    assert skipped["store_id"] == bad and "database" in skipped["error"]
    (again.path / "fine" / "ok.md").write_text("ok\n")
    again.wait_synced()
    assert server_memories(server, good) == {"/ok.md": "ok\n"}
    assert db.read_bytes().startswith(b"this is not a database")  # left as found


def test_status_of_a_path_that_is_no_mount_creates_nothing(tmp_path):
    """`memfs status DIR` looks for a session root's group.json without making the
    group's state directory (it used to leave `groups/<hash>/` behind for any path)."""
    import sys

    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"),
               PYTHONPATH=str(pathlib.Path(__file__).resolve().parent.parent))
    plain = tmp_path / "plain"
    plain.mkdir()
    out = subprocess.run([sys.executable, "-m", "memfs", "status", str(plain)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "is not a memfs mount" in out.stderr, out
    assert not (tmp_path / "cache" / "memfs" / "groups").exists()


def test_a_later_store_whose_state_dir_cannot_be_made_appears_once_it_can(server, mounts):
    """The `--all` watch survives a store whose state directory cannot be made (here a
    file stands in its way): it says so in the log and tries again at the next poll."""
    sdk = server.sdk()
    sdk.beta.memory_stores.create(name="First")
    with Gate(server) as gate:
        m = mounts.mount_group("--all", "--poll-interval", "0.5")
        key_dir = pathlib.Path(m.registry()["stores"][0]["state_dir"]).parent
        gate.hold("GET", r"/v1/memory_stores$")
        gate.wait_held(1)
        later = sdk.beta.memory_stores.create(name="Later").id
        blocker = key_dir / later
        blocker.write_text("not a directory\n")
        gate.clear()
        _wait(lambda: "cannot make its state directory" in
              (m.state_dir / "daemon.log").read_text(), 30, what="the warning")
    assert "later" not in os.listdir(m.path)
    blocker.unlink()
    _wait(lambda: "later" in os.listdir(m.path), 30, what="the later store")
    (m.path / "later" / "c.md").write_text("after all\n")
    m.wait_synced()
    assert server_memories(server, later) == {"/c.md": "after all\n"}
