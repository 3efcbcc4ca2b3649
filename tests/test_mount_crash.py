"""The daemon killed at random moments while it pushes: nothing lost, nothing doubled."""

from __future__ import annotations

import os
import random
import time

from mountutil import needs_fuse, server_memories

pytestmark = needs_fuse


def _write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def test_kill9_mid_push_rounds(mounts, server):
    """Rounds of fsync'd creates, edits, renames and deletes, each cut by kill -9 at a
    random point of the push; after a final clean unmount the server holds exactly
    the tree, one memory per file, and renamed files kept their memory ids."""
    rng = random.Random(int(os.environ.get("MEMFS_CRASH_SEED", "4")))
    store = mounts.new_store()
    expected: dict[str, str] = {}
    sdk = server.sdk()
    kept_ids: dict[str, str] = {}  # path now -> memory id it had before a rename
    for round_no in range(4):
        m = mounts.mount(store, "--write-back-delay", "0", "--delete-delay", "0")
        root = m.path
        # Everything written here is fsync'd before the kill: it must survive.
        for i in range(25):
            p = f"/r{round_no}/f{i}.md"
            expected[p] = f"round {round_no} file {i}\n" * rng.randint(1, 40)
            _write(root / p.lstrip("/"), expected[p])
        for p in rng.sample(sorted(expected), k=min(8, len(expected))):
            expected[p] += "edited\n"
            _write(root / p.lstrip("/"), expected[p])
        if round_no:
            victim = rng.choice(sorted(p for p in expected if not p.startswith(f"/r{round_no}/")))
            os.unlink(root / victim.lstrip("/"))
            del expected[victim]
            kept_ids.pop(victim, None)
            # Listed now, after this mount began pushing what the last one left: a
            # file the server already holds is renamed whenever there is one, so the
            # memory id check below always has something to hold (an answer still
            # on its way when the rename lands is part of what is tested).
            on_server = {x.path: x.id
                         for x in sdk.beta.memory_stores.memories.list(store, limit=100)}
            older = sorted(p for p in expected if not p.startswith(f"/r{round_no}/"))
            src = rng.choice([p for p in older if p in on_server] or older)
            dst = src.replace(".md", ".moved.md")
            os.rename(root / src.lstrip("/"), root / dst.lstrip("/"))
            expected[dst] = expected.pop(src)
            if src in kept_ids or src in on_server:
                kept_ids[dst] = kept_ids.pop(src, None) or on_server[src]
        time.sleep(rng.uniform(0.0, 0.3))  # somewhere in the middle of pushing
        m.kill9()
    m = mounts.mount(store, "--write-back-delay", "0", "--delete-delay", "0")
    tree = {"/" + str(p.relative_to(m.path)): p.read_text()
            for p in m.path.rglob("*") if p.is_file()}
    assert tree == expected  # the remount shows every fsync'd write at once
    m.unmount()
    assert server_memories(server, store) == expected
    memories = {x.path: x.id for x in sdk.beta.memory_stores.memories.list(store, limit=100)}
    assert len(memories) == len(expected)  # no duplicates, no leftovers
    assert kept_ids, "no rename of a pushed file happened: the test lost its point"
    for path, memory_id in kept_ids.items():
        assert memories[path] == memory_id, f"{path} lost its memory id across a rename"


def test_status_of_a_mount_whose_daemon_died_says_it_is_dead_and_how_to_clear_it(
        mounts, server):
    """Found by a helper, 6 December: `memfs status` said "daemon: not running" of a
    mount left behind dead (every access ENOTCONN) without saying so or naming the way
    out."""
    m = mounts.mount(mounts.new_store())
    (m.path / "a.md").write_text("kept\n")
    m._sigkill()  # the FUSE mount stays, dead
    status = m.memfs("status", str(m.path)).stdout
    assert "daemon: not running (from state.db)" in status, status
    assert (f"the mount is still there, dead: its daemon is gone (an access there fails with "
            f"'Transport endpoint is not connected'); memfs unmount {m.path} clears it")\
        in status, status
    m.memfs("unmount", str(m.path), check=False)
    assert "the mount is still there" not in m.memfs("status", str(m.path)).stdout


def test_status_of_a_session_root_whose_daemon_died(mounts, server):
    """Found by a helper, 6 December: `memfs status ROOT` failed ("cannot read
    .../groups/.../state.db") for a session root whose daemon died, and `memfs status`
    of every mount failed with it, the live ones not shown."""
    from test_session_mount import make_session

    sdk = server.sdk()
    store = sdk.beta.memory_stores.create(name="Team Notes").id
    sid = make_session(sdk, [{"type": "memory_store", "memory_store_id": store}])
    root = mounts.mount_group("--session", sid)
    (root.path / "team-notes" / "a.md").write_text("kept\n")
    live = mounts.mount(mounts.new_store("live"), name="live")
    root._sigkill()
    status = root.memfs("status", str(root.path)).stdout
    assert "session root" in status and "(daemon not running)" in status, status
    assert "the mount is still there, dead" in status, status
    assert "[team-notes]" in status, status
    every = live.memfs("status").stdout
    assert str(live.path) in every and str(root.path) in every, every
    root.memfs("unmount", str(root.path), check=False)
    live.unmount()
