"""`memfs mcp --mount` and `memfs watch` on a live mount: reads from the mount's cache,
changes from the daemon's own feed, and not one request more for an idle mount (counted
in `memfs serve --verbose`'s request log)."""

from __future__ import annotations

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest
import trio
from conftest import start_server
from mcp.types import ResourceUpdatedNotification
from mountutil import Mounts, needs_fuse, server_memories
from synchelpers import cat, flush, sdk_create, sdk_update, wait_for
from test_mcp import call, env_for, exits_when_stdin_closes, stdio_session
from test_watch import Watcher
from toolutil import outcome, sync_tool

pytestmark = needs_fuse

#: A /v1/ request in the server's --verbose log: (method, path).
REQUEST = re.compile(r"memfs\.server: \S+ ([A-Z]+) (/v1/\S*?)(?:\?\S*)? (?:\d{3}|dropped) ")


def requests(log: pathlib.Path, start: int) -> list[tuple[str, str]]:
    with open(log, "rb") as f:
        f.seek(start)
        return REQUEST.findall(f.read().decode(errors="replace"))


def is_feed_poll(request: tuple[str, str]) -> bool:
    method, path = request
    return method == "GET" and path.rstrip("/").endswith("/memory_versions")


@pytest.fixture
def verbose(tmp_path):
    """A `memfs serve --verbose` (every request in its log) and mounts on it."""
    sp = start_server(tmp_path, api_key="test-key", extra_args=("--fault-control",
                                                                "--verbose"))
    ms = Mounts(sp, tmp_path)
    try:
        yield sp, ms
    finally:
        ms.cleanup()
        sp.stop()


# Clients before protocol 2026-07-28 subscribe with resources/subscribe, which the SDK now
# flags as deprecated; memfs serves them still (test_listen_streams_of_2026_clients: the new way).
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_mcp_over_a_mount_reads_from_its_cache(verbose, tmp_path):
    server, mounts = verbose
    store = mounts.new_store("Mounted Notes")
    mid = sdk_create(server, store, "/a.md", "alpha\nbeta\n").id
    sdk_create(server, store, "/d/b.md", "gamma\n")
    m = mounts.mount(store)
    wait_for(lambda: cat(m.path / "d" / "b.md") == "gamma\n", what="seeded")
    reference = sync_tool(server, store)
    notes: list = []
    async with stdio_session(env_for(server, tmp_path), "--mount", str(m.path),
                             notes=notes) as session:
        reads = [{"command": "view", "path": "/memories"},
                 {"command": "view", "path": "/memories/a.md"},
                 {"command": "view", "path": "/memories/a.md", "view_range": [2, 2]},
                 {"command": "view", "path": "/memories/d"},
                 {"command": "view", "path": "/memories/nope.md"}]
        expected = [await trio.to_thread.run_sync(outcome, reference, c) for c in reads]
        start = server.log_path.stat().st_size
        assert [await call(session, c) for c in reads] == expected
        uris = [r.uri for r in (await session.list_resources()).resources]
        assert uris == ["memory://mounted-notes/a.md", "memory://mounted-notes/d/b.md"]
        read = await session.read_resource("memory://mounted-notes/d/b.md")
        assert read.contents[0].text == "gamma\n"
        found = await session.call_tool("search", {"pattern": "mm"})
        assert found.content[0].text.endswith("/memories/d/b.md:1: gamma")
        # Every read above came from the mount: at most its own feed polls meanwhile.
        assert all(is_feed_poll(r) for r in requests(server.log_path, start))

        # A change through the tool goes to the store, and the mount shows it at once.
        assert await call(session, {"command": "create", "path": "/memories/new.md",
                                    "file_text": "fresh\n"}) == (
            "ok", "File created successfully at: /memories/new.md")
        assert cat(m.path / "new.md") == "fresh\n"
        assert (await call(session, {"command": "view", "path": "/memories/new.md"}))[1] \
            .endswith("     1\tfresh\n     2\t")

        # A change made elsewhere: `updated`, from the daemon's feed.
        await session.subscribe_resource("memory://mounted-notes/a.md")
        sdk_update(server, store, mid, content="changed\n")
        with trio.fail_after(60):
            while not any(isinstance(n, ResourceUpdatedNotification) for n in notes):
                await trio.sleep(0.05)
        assert cat(m.path / "a.md") == "changed\n"
    exits_when_stdin_closes(env_for(server, tmp_path), "--mount", str(m.path))


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_mcp_over_a_mount_serves_its_memories_as_the_api_would(verbose, tmp_path):
    """What `--mount` read from the mount and what it changed through the API parted
    (found by a helper, 6 December): view showed a file's unpushed edit while an edit
    went to the server's older text (the user's kept aside as a conflict); view, search
    and resources showed editor temp files, refused files and `.memfs`'s versions,
    which are no memories; search given a file found nothing. Now a change first has
    the mount push what it holds (and is refused, said, if that cannot be done), and
    only memories are shown."""
    server, mounts = verbose
    store = mounts.new_store("Agent Notes")
    sdk_create(server, store, "/x.md", "line one\n")
    m = mounts.mount(store, "--write-back-delay", "30", "--show-meta")
    wait_for(lambda: cat(m.path / "x.md") == "line one\n", what="seeded")
    (m.path / "notes.md~").write_text("a backup\n")          # an editor's: local-only
    (m.path / "bin.md").write_bytes(b"\xff not UTF-8 backup\n")
    flush(m)  # the server refuses bin.md: it stays here only
    assert os.getxattr(m.path / "bin.md", "user.memfs.state") == b"refused"
    (m.path / "x.md").write_text("USER edit, not pushed\n")  # waits out 30 s
    async with stdio_session(env_for(server, tmp_path), "--mount", str(m.path)) as session:
        assert await call(session, {"command": "view", "path": "/memories"}) == (
            "ok", "Here're the files and directories up to 2 levels deep in /memories, "
                  "excluding hidden items:\n22B\t/memories\n22B\t/memories/x.md")
        assert await call(session, {"command": "view", "path": "/memories/notes.md~"}) == (
            "error", "The path /memories/notes.md~ does not exist. Please provide a valid "
                     "path.")
        found = await session.call_tool("search", {"pattern": "backup"})
        assert found.content[0].text == "No matches for 'backup' in /memories."
        found = await session.call_tool("search", {"pattern": "USER",
                                                    "path": "/memories/x.md"})
        assert found.content[0].text.endswith("/memories/x.md:1: USER edit, not pushed")
        uris = [r.uri for r in (await session.list_resources()).resources]
        assert uris == ["memory://agent-notes/x.md"]
        # The edit is made to the text view showed: the mount pushed it first.
        assert (await call(session, {"command": "str_replace", "path": "/memories/x.md",
                                     "old_str": "USER edit", "new_str": "agent edit"}))[0] \
            == "ok"
        assert server_memories(server, store)["/x.md"] == "agent edit, not pushed\n"
        assert m.status()["conflicts"] == []
        # A change the mount cannot push first is refused, not made over older text.
        (m.path / "x.md").write_text("offline edit\n")
        server.set_faults(error_rate=1.0, error_status=503)
        try:
            kind, text = await call(session, {"command": "str_replace", "path":
                                              "/memories/x.md", "old_str": "offline",
                                              "new_str": "lost"})
        finally:
            server.clear_faults()
        assert (kind, text) == ("error", "/memories/x.md was not changed: the mount holds "
                                "changes of it that have not reached the server yet (memfs "
                                "status); try again once they have.")
        assert cat(m.path / "x.md") == "offline edit\n"


async def test_watchers_add_no_request_to_an_idle_mount(verbose, tmp_path):
    """An idle mount makes its feed polls and nothing else; with a `memfs watch` and a
    `memfs mcp --mount` attached it makes exactly the same kind and no more of them.
    `MEMFS_IDLE_WINDOW` (seconds, default 4) lengthens the windows for docs/BENCHMARKS.md."""
    server, mounts = verbose
    window = float(os.environ.get("MEMFS_IDLE_WINDOW", "4"))
    store = mounts.new_store("idle")
    for i in range(20):
        sdk_create(server, store, f"/n/{i}.md", f"note {i}\n")
    m = mounts.mount(store)  # --poll-interval 1
    wait_for(lambda: cat(m.path / "n" / "19.md") == "note 19\n", what="seeded")
    m.wait_synced()
    await trio.sleep(2)  # the start-up listing and prefetch are over

    def measure() -> list[tuple[str, str]]:
        start = server.log_path.stat().st_size
        time.sleep(window)
        return requests(server.log_path, start)

    alone = await trio.to_thread.run_sync(measure)
    watcher = Watcher(m.env, "--json", str(m.path))
    try:
        watcher.wait_started()
        async with stdio_session(env_for(server, tmp_path), "--mount", str(m.path)) as session:
            await session.list_tools()
            watched = await trio.to_thread.run_sync(measure)
    finally:
        watcher.stop()
    print(f"\nidle mount, {window:g} s, --poll-interval 1: alone {len(alone)} request(s) "
          f"({sum(map(is_feed_poll, alone))} feed polls); with memfs watch and memfs mcp "
          f"--mount: {len(watched)} ({sum(map(is_feed_poll, watched))} feed polls)")
    assert alone and all(is_feed_poll(r) for r in alone), alone
    assert watched and all(is_feed_poll(r) for r in watched), watched
    # One poll a second at most, as alone; a poll reads the feed's head and, while recent
    # versions settle (the seeding, 30 s), its settled edge: two requests (docs/SYNC.md).
    assert len(watched) <= 2 * (window / 1.0 + 1)
    assert watcher.lines.empty()  # nothing changed: nothing printed


NO_MEMORY = (" in the mount, as no memory (an editor's temp file or a directory with no "
             "memory in it), so view does not show it.")


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_mcp_over_a_mount_changes_nothing_only_the_mount_holds(verbose, tmp_path):
    """What the mount holds and the server does not show is left alone, said in the
    tool's words (found by a helper, 6 December): a file whose edit the server refused
    for its bytes took edits, renames and deletes through the API, made to the server's
    older text, and the mount then kept the user's bytes as a conflict; a create onto
    an empty directory of the mount answered "created", then "does not exist" (the
    mount hid the memory that collided with it), then "already exists"."""
    server, mounts = verbose
    store = mounts.new_store("Held Here")
    sdk_create(server, store, "/bad.md", "good text\n")
    sdk_create(server, store, "/ok.md", "fine\n")
    m = mounts.mount(store)
    wait_for(lambda: cat(m.path / "ok.md") == "fine\n", what="seeded")
    (m.path / "bad.md").write_bytes(b"bad \xff text\n")
    flush(m)
    assert os.getxattr(m.path / "bad.md", "user.memfs.state") == b"refused"
    (m.path / "emptydir").mkdir()
    (m.path / "keep.md~").write_text("an editor's backup\n")
    refused = ("error", "/memories/bad.md was not changed: the mount holds a version of it "
               "that the server refused (not UTF-8, or over a limit: memfs status says "
               "why); change it in the mount.")
    async with stdio_session(env_for(server, tmp_path), "--mount", str(m.path)) as session:
        for command in (
                {"command": "str_replace", "path": "/memories/bad.md", "old_str": "text",
                 "new_str": "TEXT"},
                {"command": "insert", "path": "/memories/bad.md", "insert_line": 0,
                 "insert_text": "top\n"},
                {"command": "delete", "path": "/memories/bad.md"},
                {"command": "rename", "old_path": "/memories/bad.md",
                 "new_path": "/memories/moved.md"},
                {"command": "create", "path": "/memories/bad.md", "file_text": "new\n"},
                {"command": "rename", "old_path": "/memories/ok.md",
                 "new_path": "/memories/bad.md"}):
            assert await call(session, command) == refused, command
        assert await call(session, {"command": "view", "path": "/memories/bad.md"}) == (
            "error", "/memories/bad.md is not shown: the mount holds a version of it that "
                     "the server refused (not UTF-8, or over a limit: memfs status says why).")
        for name in ("emptydir", "keep.md~"):
            assert await call(session, {"command": "create", "path": f"/memories/{name}",
                                        "file_text": "x\n"}) == (
                "error", f"File /memories/{name} already exists{NO_MEMORY}")
            assert await call(session, {"command": "rename", "old_path": "/memories/ok.md",
                                        "new_path": f"/memories/{name}"}) == (
                "error", f"The destination /memories/{name} already exists{NO_MEMORY}")
        # ... nor under such a file (the memory would collide with it, unseen)
        for above in ("keep.md~", "bad.md"):
            assert await call(session, {"command": "create", "path": f"/memories/{above}/x.md",
                                        "file_text": "x\n"}) == (
                "error", f"File /memories/{above}/x.md was not created: /memories/{above} is "
                         "a file, so it cannot hold other files.")
            assert await call(session, {"command": "rename", "old_path": "/memories/ok.md",
                                        "new_path": f"/memories/{above}/x.md"}) == (
                "error", f"Cannot rename /memories/ok.md to /memories/{above}/x.md: "
                         f"/memories/{above} is a file, so it cannot hold other files.")
        # The mount's own names (.memfs, .memfs-moving): no memory shows there, so none
        # is made there; one another writer made there is as missing as view says
        # (created, then "does not exist", then edited: a helper, 6 December).
        sdk_create(server, store, "/.memfs/theirs.md", "hidden\n")
        assert await call(session, {"command": "create", "path": "/memories/.memfs/n.md",
                                    "file_text": "x\n"}) == (
            "error", "File /memories/.memfs/n.md was not created: /memories/.memfs is the "
                     "mount's own (memfs keeps it for itself), so a memory there would not "
                     "show in the mount.")
        assert await call(session, {"command": "rename", "old_path": "/memories/ok.md",
                                    "new_path": "/memories/.memfs-moving/x.md"}) == (
            "error", "Cannot rename /memories/ok.md to /memories/.memfs-moving/x.md: "
                     "/memories/.memfs-moving is the mount's own (memfs keeps it for "
                     "itself), so a memory there would not show in the mount.")
        for command in ({"command": "view", "path": "/memories/.memfs/theirs.md"},
                        {"command": "str_replace", "path": "/memories/.memfs/theirs.md",
                         "old_str": "hidden", "new_str": "seen"}):
            assert await call(session, command) == (
                "error", "The path /memories/.memfs/theirs.md does not exist. Please "
                         "provide a valid path."), command
        assert await call(session, {"command": "delete",
                                    "path": "/memories/.memfs/theirs.md"}) == (
            "error", "The path /memories/.memfs/theirs.md does not exist")
        # what the server holds is still changed as before
        assert await call(session, {"command": "rename", "old_path": "/memories/ok.md",
                                    "new_path": "/memories/moved.md"}) == (
            "ok", "Successfully renamed /memories/ok.md to /memories/moved.md")
    assert server_memories(server, store) == {"/bad.md": "good text\n", "/moved.md": "fine\n",
                                              "/.memfs/theirs.md": "hidden\n"}
    assert (m.path / "bad.md").read_bytes() == b"bad \xff text\n"
    assert m.status()["conflicts"] == []
    assert cat(m.path / "moved.md") == "fine\n"


async def test_mcp_over_a_mount_that_went_away_says_so(verbose, tmp_path):
    """Unmounted, the mountpoint is an empty folder: `--mount` answered from it (every
    file "does not exist", a search found nothing, no resource) while a change still
    went to the server (found by a helper, 6 December). Now every call says the mount
    is gone, until a mount of the same store is made there again."""
    server, mounts = verbose
    store = mounts.new_store("Gone Notes")
    sdk_create(server, store, "/a.md", "alpha\n")
    m = mounts.mount(store)
    wait_for(lambda: cat(m.path / "a.md") == "alpha\n", what="seeded")
    async with stdio_session(env_for(server, tmp_path), "--mount", str(m.path)) as session:
        view = {"command": "view", "path": "/memories/a.md"}
        assert (await call(session, view))[0] == "ok"
        m.unmount()
        gone = (f"The mount at {m.path} is gone (not mounted): nothing was read or "
                "changed. Mount it again (memfs mount), or run memfs mcp without --mount.")
        assert await call(session, view) == ("error", gone)
        assert await call(session, {"command": "create", "path": "/memories/b.md",
                                    "file_text": "new\n"}) == ("error", gone)
        found = await session.call_tool("search", {"pattern": "alpha"})
        assert (found.is_error, found.content[0].text) == (True, gone)
        with pytest.raises(Exception, match="is gone"):
            await session.list_resources()
        with pytest.raises(Exception, match="is gone"):
            await session.read_resource("memory://gone-notes/a.md")
        assert sorted(server_memories(server, store)) == ["/a.md"]  # b.md not made

        m.mount()  # the same store at the same place: served again
        assert await call(session, view) == (
            "ok", "Here's the content of /memories/a.md with line numbers:\n     1\talpha\n"
                  "     2\t")
        # Another store mounted there (the kernel may give it the same device number):
        # not served as this one (a reviewer found it was, 6 December).
        m.unmount()
        other = mounts.new_store("Other Notes")
        sdk_create(server, other, "/a.md", "NOT gone notes\n")
        o = mounts.mount(other)
        assert o.path == m.path
        assert await call(session, view) == ("error", gone.replace(
            "(not mounted)", "(another store is mounted there now)"))
        assert sorted(server_memories(server, store)) == ["/a.md"]


async def test_mcp_over_a_mount_that_dies_during_a_read_says_so(tmp_path, monkeypatch):
    """A walk skips what it cannot read: a mount that died during a search answered "No
    matches" (found by a reviewer, 6 December). The mount is checked after each read
    too, and its end wins over what the read made of it. (Handler level: the daemon's
    death is timed by the check.)"""
    from memfs.tool.mcp import MemoryMCP, MountLink, Served
    from memfs.tool.store import StoreMemory
    from memfs.tool.text import ToolFailure

    (tmp_path / "a.md").write_text("alpha\n")
    link = MountLink(tmp_path, root=tmp_path, store_ids=frozenset({"memstore_1"}))
    checks = []

    def check() -> None:  # there before the read, gone after it
        checks.append(1)
        if len(checks) % 2 == 0:
            raise ToolFailure("The mount at X is gone (died)")

    monkeypatch.setattr(link, "check", check)
    served = Served(slug="s", store_id="memstore_1", name="s",
                    memory=StoreMemory("memstore_1", "http://127.0.0.1:9", None),
                    mount_dir=tmp_path)
    mcp = MemoryMCP([served], base_url="http://127.0.0.1:9", api_key=None, mount=link)
    for call_it in (lambda: mcp.search({"pattern": "zzz"}),
                    lambda: mcp.command({"command": "view", "path": "/memories/nope.md"}),
                    lambda: mcp.command({"command": "view", "path": "/memories"})):
        with pytest.raises(ToolFailure, match="is gone"):
            await call_it()


async def test_mcp_over_one_stores_directory_of_a_live_root(verbose, tmp_path):
    """`--mount ROOT/STORE` serves that store of the root's daemon, as `memfs watch
    ROOT/STORE` follows it (it said "is not a live memfs mount": a helper, 6 December)."""
    server, mounts = verbose
    store = mounts.new_store("Under Root")
    mounts.new_store("Another")
    sdk_create(server, store, "/a.md", "alpha\n")
    m = mounts.mount_group("--all")
    wait_for(lambda: cat(m.path / "under-root" / "a.md") == "alpha\n", what="seeded")
    async with stdio_session(env_for(server, tmp_path), "--mount",
                             str(m.path / "under-root")) as session:
        assert await call(session, {"command": "view", "path": "/memories/a.md"}) == (
            "ok", "Here's the content of /memories/a.md with line numbers:\n     1\talpha\n"
                  "     2\t")
        assert (await call(session, {"command": "create", "path": "/memories/b.md",
                                     "file_text": "beta\n"}))[0] == "ok"
    assert server_memories(server, store) == {"/a.md": "alpha\n", "/b.md": "beta\n"}
    assert cat(m.path / "under-root" / "b.md") == "beta\n"
    # The store named too, by its id or name, as everywhere (it said "holds under-root
    # only": a reviewer); another store of the root is not that directory's.
    for named in (store, "Under Root"):
        async with stdio_session(env_for(server, tmp_path), "--mount",
                                 str(m.path / "under-root"), named) as session:
            assert (await call(session, {"command": "view", "path": "/memories/b.md"}))[0] \
                == "ok"
    refused = subprocess.run(
        [sys.executable, "-m", "memfs", "mcp", "--mount", str(m.path / "under-root"),
         "Another"], env=env_for(server, tmp_path), capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL)
    assert refused.returncode == 2 and "holds under-root only" in refused.stderr, refused
