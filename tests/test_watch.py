"""`memfs watch`: a store's changes, one line each, from a live mount's own feed (the
daemon's `events` stream) or, without a mount, from the versions list it polls."""

from __future__ import annotations

# ruff: noqa: F811  (pytest fixtures imported from mountutil are redefined as arguments)
import json
import queue
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from click.testing import CliRunner
from mountutil import mount_env, mounts, needs_fuse  # noqa: F401
from synchelpers import cat, flush, sdk_create, sdk_delete, sdk_update, wait_for

from memfs.api.models import MemoryVersion
from memfs.cli import watch as cli_watch
from memfs.sync.events import Event, EventBus, Subscriber
from memfs.sync.watch import poll_store


class Watcher:
    """`memfs watch ARGS` as a process; its stdout lines on a queue, its stderr kept."""

    def __init__(self, env: dict, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "memfs", "watch", *args], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        self.started = threading.Event()
        threading.Thread(target=self._pump_out, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)
            if line.startswith("watching "):
                self.started.set()

    def wait_started(self) -> None:
        assert self.started.wait(60), "".join(self.err)

    def next(self, timeout: float = 60) -> dict:
        try:
            return json.loads(self.lines.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"no event; stderr: {''.join(self.err)}") from None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture
def watchers():
    made: list[Watcher] = []
    yield lambda env, *args: made.append(Watcher(env, *args)) or made[-1]
    for w in made:
        w.stop()


@needs_fuse
def test_watch_json_on_a_mount_in_order_with_authors(mounts, server, watchers):
    store = mounts.new_store()
    conflicted = sdk_create(server, store, "/c.md", "base\n").id
    m = mounts.mount(store, "--write-back-delay", "30")
    wait_for(lambda: cat(m.path / "c.md") == "base\n", what="seeded")
    w = watchers(m.env, "--json", str(m.path))
    w.wait_started()

    def step(action, kind: str, path: str) -> dict:
        action()
        m.sync_now()
        event = w.next()
        assert (event["kind"], event["path"]) == (kind, path), event
        assert event["store_id"] == store and event["version_id"].startswith("memver_")
        assert event["author"]["type"] == "api_actor" and event["author"]["api_key_id"], event
        assert event["time"].endswith("Z")
        return event

    mid = step(lambda: sdk_create(server, store, "/a.md", "one\n"), "created", "/a.md")[
        "memory_id"]
    step(lambda: sdk_update(server, store, mid, content="two\n"), "modified", "/a.md")
    renamed = step(lambda: sdk_update(server, store, mid, path="/b.md"), "renamed", "/b.md")
    assert renamed["old_path"] == "/a.md"
    # One version that moves and edits: one event (it was two, the edit first: a helper).
    both = step(lambda: sdk_update(server, store, mid, path="/d/b.md", content="three\n"),
                "renamed", "/d/b.md")
    assert both["old_path"] == "/b.md" and cat(m.path / "d" / "b.md") == "three\n"
    step(lambda: sdk_delete(server, store, mid), "deleted", "/d/b.md")

    def local_write() -> None:
        (m.path / "local.md").write_text("mine\n")
        flush(m)

    pushed = step(local_write, "pushed", "/local.md")
    versions = server.sdk().beta.memory_stores.memory_versions.list(
        store, memory_id=pushed["memory_id"])
    assert pushed["version_id"] == next(iter(versions)).id

    def conflict() -> None:
        (m.path / "c.md").write_text("local edit\n")
        sdk_update(server, store, conflicted, content="remote edit\n")

    step(conflict, "conflict", "/c.md")
    assert w.lines.empty()


@needs_fuse
def test_watch_human_lines_and_since_replay(mounts, server, watchers):
    store = mounts.new_store("Team Notes")
    mid = sdk_create(server, store, "/x.md", "1\n").id
    first = next(iter(server.sdk().beta.memory_stores.memory_versions.list(
        store, memory_id=mid))).id
    sdk_update(server, store, mid, path="/y.md")
    sdk_delete(server, store, mid)
    m = mounts.mount(store)
    w = watchers(m.env, str(m.path), "--since", first)
    w.wait_started()
    lines = [w.lines.get(timeout=60) for _ in range(2)]
    assert " renamed /x.md -> /y.md (api:" in lines[0], lines
    assert " deleted /y.md (api:" in lines[1], lines
    assert lines[0].split()[1] == store  # a plain mount names its store by id


def test_watch_without_mount_polls_the_versions_list(server, tmp_path, watchers):
    store = server.sdk().beta.memory_stores.create(name="Polled").id
    env = mount_env(server, tmp_path)
    w = watchers(env, "--json", "--poll-interval", "0.2", "polled")
    w.wait_started()
    mid = sdk_create(server, store, "/p.md", "1\n").id
    assert (w.next()["kind"], "/p.md") == ("created", "/p.md")
    sdk_update(server, store, mid, path="/q.md")
    event = w.next()
    assert (event["kind"], event["old_path"], event["path"]) == ("renamed", "/p.md", "/q.md")
    assert event["store"] == "Polled" and event["author"]["type"] == "api_actor"


def test_watch_of_a_path_that_is_no_mount_says_so(server, tmp_path):
    """It said "unknown store '/tmp/…'" (found by a helper, 6 December)."""
    env = mount_env(server, tmp_path)
    for target in (str(tmp_path / "nonexist"), str(tmp_path)):
        proc = subprocess.run([sys.executable, "-m", "memfs", "watch", target], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1, proc
        assert proc.stderr == f"Error: {target} is not a live memfs mount (nor one store's " \
                              "directory under a live session root), nor a store's name\n", \
            proc.stderr
    # a store's name that is also a path here is watched (it was refused for a while)
    (tmp_path / "here").mkdir()
    server.sdk().beta.memory_stores.create(name="here")
    w = subprocess.Popen([sys.executable, "-m", "memfs", "watch", "here"], env=env,
                         cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    try:
        assert w.stderr.readline().startswith("watching here on "), w
    finally:
        w.terminate()
        w.wait(30)


def test_watch_refuses_a_bad_since(server, tmp_path):
    server.sdk().beta.memory_stores.create(name="s")
    proc = subprocess.run([sys.executable, "-m", "memfs", "watch", "s", "--since", "soon"],
                          env=mount_env(server, tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1
    assert "--since 'soon': give a version id" in proc.stderr
    assert "Traceback" not in proc.stderr


async def test_a_slow_reader_drops_counts_and_is_told():
    """The bus never waits for a reader: past the queue's size events are dropped, and
    the reader learns how many with the next one it takes."""
    bus, sub = EventBus("memstore_x", "notes"), Subscriber(limit=3)
    bus.attach(sub)
    from memfs.api.models import Memory

    for i in range(10):
        bus.remote("created", Memory(f"mem_{i}", "memstore_x", f"/{i}.md", None, 1, "s",
                                     f"memver_{i}"))
    got = [sub.receive.receive_nowait() for _ in range(3)]
    assert [e.path for e in got] == ["/0.md", "/1.md", "/2.md"]
    lost = sub.take_dropped()
    assert isinstance(lost, Event) and lost.dropped == 7 and sub.take_dropped() is None
    bus.detach(sub)
    bus.remote("created", Memory("m", "memstore_x", "/z.md", None, 1, "s", "v"))
    assert sub.dropped == 0  # no subscriber: no event at all


@needs_fuse
def test_watch_a_store_of_a_session_root(mounts, server, watchers):
    from test_session_mount import make_session

    sdk = server.sdk()
    prefs = sdk.beta.memory_stores.create(name="User Preferences").id
    docs = sdk.beta.memory_stores.create(name="Reference Docs").id
    sid = make_session(sdk, [{"type": "memory_store", "memory_store_id": prefs},
                             {"type": "memory_store", "memory_store_id": docs}])
    m = mounts.mount_group("--session", sid)
    both = watchers(m.env, "--json", str(m.path))
    one = watchers(m.env, "--json", str(m.path / "reference-docs"))
    both.wait_started()
    one.wait_started()
    sdk_create(server, prefs, "/p.md", "p")
    m.sync_now()
    event = both.next()
    assert (event["store"], event["store_id"], event["kind"], event["path"]) == (
        "user-preferences", prefs, "created", "/p.md")
    sdk_create(server, docs, "/d.md", "d")
    m.sync_now()
    assert (both.next()["store"], one.next()["store"]) == ("reference-docs", "reference-docs")
    assert one.lines.empty()  # the other store's change never reached it


@needs_fuse
def test_a_reader_that_stops_reading_never_slows_the_mount(mounts, server):
    """A reader of the daemon's `events` stream that stops reading: the daemon's socket
    buffer fills, then the reader's queue (5 here); further events are dropped and counted,
    the mount goes on (a remote burst lands, a local write is pushed), and once the reader
    reads again it is told how many it missed: delivered + dropped = every change."""
    import socket as sockets

    from memfs.local import control

    store = mounts.new_store()
    m = mounts.mount(store)
    burst = 400
    with control.short_path(m.state_dir) as short, \
            sockets.socket(sockets.AF_UNIX) as sock:
        sock.connect(short)
        sock.sendall(json.dumps({"cmd": "events", "queue": 5}).encode() + b"\n")
        lines = sock.makefile("rb")
        assert json.loads(lines.readline())["ok"] is True
        sdk = server.sdk()
        for i in range(burst):  # not read meanwhile
            sdk.beta.memory_stores.memories.create(store, path=f"/burst/{i}.md", content="x")
        m.sync_now()
        wait_for(lambda: len(list((m.path / "burst").iterdir())) == burst, what="burst")
        (m.path / "mine.md").write_text("still writable\n")
        flush(m)
        delivered = dropped = 0
        sock.settimeout(30)
        while delivered + dropped < burst + 1:
            event = json.loads(lines.readline())
            if event["kind"] == "dropped":
                dropped += event["dropped"]
            else:
                delivered += 1
        assert dropped > 0 and delivered + dropped == burst + 1


@needs_fuse
def test_a_reader_that_shuts_its_reading_end_leaves_the_mount_up(mounts, server):
    """A reader of the `events` stream that shuts down its reading end (a client gone
    half-way): the next event's send fails with EPIPE inside the stream's nursery, which
    took the whole daemon down, its mount gone (found by hand, 6 December). Now that
    connection ends alone: the mount serves, pushes and answers `memfs status`."""
    import socket as sockets

    from memfs.local import control

    store = mounts.new_store()
    m = mounts.mount(store)
    with control.short_path(m.state_dir) as short, \
            sockets.socket(sockets.AF_UNIX) as sock:
        sock.connect(short)
        sock.sendall(json.dumps({"cmd": "events"}).encode() + b"\n")
        assert json.loads(sock.makefile("rb").readline())["ok"] is True
        sock.shutdown(sockets.SHUT_RD)
        for i in range(3):  # events the daemon sends to a reader that reads no more
            (m.path / f"n{i}.md").write_text(f"note {i}\n")
            flush(m)
    (m.path / "after.md").write_text("the mount is still here\n")
    flush(m)
    assert cat(m.path / "after.md") == "the mount is still here\n"
    assert {x.path for x in server.sdk().beta.memory_stores.memories.list(store)} >= {
        "/n0.md", "/after.md"}
    status = json.loads(m.memfs("status", str(m.path), "--json").stdout)
    assert status["tree"]["files"] == 4 and not any(status["pending"].values())


def test_watch_since_an_age_replays_without_a_mount(server, tmp_path, watchers):
    store = server.sdk().beta.memory_stores.create(name="Replayed").id
    mid = sdk_create(server, store, "/r.md", "1\n").id
    sdk_update(server, store, mid, path="/s.md")
    sdk_delete(server, store, mid)
    w = watchers(mount_env(server, tmp_path), "--json", "--since", "10m", store)
    w.wait_started()
    got = [w.next() for _ in range(3)]
    assert [(e["kind"], e["path"], e.get("old_path")) for e in got] == [
        ("created", "/r.md", None), ("renamed", "/s.md", "/r.md"), ("deleted", "/s.md", None)]
    assert all(e["author"]["type"] == "api_actor" for e in got)


def test_watch_since_prints_nothing_from_before_it(server, tmp_path, watchers):
    """A store-polling watch given --since printed, after the replay, the versions of
    the last 30 s from before it, out of order (its first poll read the lookback window
    back: a helper). Since a version: what came after it, then what comes next."""
    store = server.sdk().beta.memory_stores.create(name="Since").id
    sdk_create(server, store, "/a.md", "a\n")
    since = sdk_create(server, store, "/b.md", "b\n").memory_version_id
    sdk_create(server, store, "/c.md", "c\n")
    w = watchers(mount_env(server, tmp_path), "--json", "--since", since,
                 "--poll-interval", "0.2", store)
    w.wait_started()
    assert w.next()["path"] == "/c.md"
    time.sleep(1.0)  # polls that found a.md and b.md in their window printed them
    sdk_create(server, store, "/d.md", "d\n")
    assert w.next()["path"] == "/d.md"
    # A time after every version: nothing of the past (the first poll is 0.2 s away).
    w = watchers(mount_env(server, tmp_path), "--json", "--since", "2099-01-01T00:00:00Z",
                 "--poll-interval", "0.2", store)
    w.wait_started()
    with pytest.raises(AssertionError, match="no event"):
        w.next(timeout=2.0)


class _Versions:
    """A versions list of one version; each call's `created_gte` kept. The third call
    ends the watch."""

    def __init__(self) -> None:
        self.asked: list[str | None] = []

    async def list_versions(self, store_id, *, created_gte=None, limit=None):
        self.asked.append(created_gte)
        if len(self.asked) > 2:
            raise RuntimeError("enough")
        yield MemoryVersion("memver_1", "memstore_x", "mem_1", "created", "/a.md",
                            created_at="2026-12-04T10:00:30.000000Z")


@pytest.mark.parametrize("lookback", [None, timedelta(seconds=2)])
async def test_each_poll_reads_back_the_lookback(lookback):
    """Without a mount each poll asks again for the versions created since the newest seen
    minus the lookback (a write the server commits late is caught there): 30 s, as a
    mount's feed, unless `memfs watch --lookback` says otherwise."""
    client = _Versions()
    kw = {} if lookback is None else {"lookback": lookback}
    with pytest.raises(RuntimeError, match="enough"):
        async for _ in poll_store(client, "memstore_x", "x", None, 0.0, **kw):
            pass
    since = "2026-12-04T10:00:00.000000Z" if lookback is None else "2026-12-04T10:00:28.000000Z"
    assert client.asked == [None, since, since]


def test_watch_hands_its_lookback_to_the_polls(server, tmp_path, monkeypatch):
    server.sdk().beta.memory_stores.create(name="lb")
    asked = []

    async def polls(client, store_id, store, since, interval, ready, *, lookback):
        asked.append((store, interval, lookback))
        raise RuntimeError("stop here")
        yield

    monkeypatch.setattr(cli_watch, "poll_store", polls)
    result = CliRunner().invoke(cli_watch.watch, ["lb", "--lookback", "2.5",
                                                  "--poll-interval", "0.5"],
                                env=mount_env(server, tmp_path))
    assert "stop here" in result.output and result.exit_code == 1
    assert asked == [("lb", 0.5, timedelta(seconds=2.5))]


async def test_a_reader_that_comes_during_the_final_flush_is_told_the_end():
    """A watch started while `memfs unmount` flushes (found by a helper, 6 December):
    its subscription came after the bus ended, and it heard a daemon that died."""
    import trio

    bus = EventBus("memstore_1")
    bus.end()
    late = Subscriber()
    bus.attach(late)
    with pytest.raises(trio.EndOfChannel):
        await late.receive.receive()


@needs_fuse
@pytest.mark.parametrize("how", ["unmounted", "fusermount3 -u", "killed"])
def test_watch_says_how_its_mount_ended(mounts, server, watchers, how):
    """An unmount ends the watch after its last event, said (exit 0); a daemon that died
    is an error (exit 1) that names the way on. Before (found by a helper, 6 December),
    both ended in silence with exit 0: a script could not tell them apart."""
    store = mounts.new_store("Ends")
    m = mounts.mount(store)
    w = watchers(m.env, str(m.path), "--json")
    w.wait_started()
    (m.path / "last.md").write_text("the last word\n")
    if how != "killed":
        if how == "unmounted":
            m.unmount()
        else:  # from outside: the daemon flushes and ends the same (it cut the end off)
            subprocess.run(["fusermount3", "-u", str(m.path)], check=True)
        assert w.proc.wait(60) == 0, "".join(w.err)
        assert w.next(5)["path"] == "/last.md"  # told before the end
        assert f"memfs watch: {m.path} was unmounted\n" in w.err
    else:
        m.kill9()
        assert w.proc.wait(60) == 1, "".join(w.err)
        assert any(f"the mount's daemon stopped without an unmount: memfs status {m.path}"
                   in line for line in w.err), w.err


async def test_a_mount_s_event_is_told_once_the_kernel_has_been():
    """A remote edit's event went out before the kernel heard of the change, and a `cat`
    on it read the new text padded with NULs to the old size (`memfs mcp --mount` in CI).
    The stream waits for the invalidations queued so far (2 s at most)."""
    from types import SimpleNamespace

    import trio

    from memfs.sync.common import SyncContext
    from memfs.sync.watch import follow_buses

    class Context:  # what follow_buses reads of a SyncContext
        kernel_told = SyncContext.kernel_told

        def __init__(self) -> None:
            self.store_id, self.client = "memstore_1", None
            self.events = EventBus("memstore_1")
            self.invalidations_queued = self.invalidations_sent = 0

    ctx = Context()
    told: list[tuple[float, dict]] = []
    async with trio.open_nursery() as nursery:
        async def read() -> None:
            async for line in follow_buses([SimpleNamespace(ctx=ctx)], None):
                told.append((trio.current_time(), line))
                if len(told) == 2:
                    return

        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        ctx.invalidations_queued += 1  # the remote edit's invalidation, not yet sent
        ctx.events._emit("modified", "/a.md")  # noqa: SLF001 - the reconciler's event
        await trio.sleep(0.3)
        assert len(told) == 1  # the first line only: the event waits for the kernel
        sent_at = trio.current_time()
        ctx.invalidations_sent += 1
    assert told[1][1]["kind"] == "modified" and told[1][0] >= sent_at
