"""The reconciler on the change feed (memfs/sync/feed.py), against a real `memfs serve`.

Every merge-table row driven through a feed poll; the feed's fallbacks to a
full listing; and a randomized comparison in which another client keeps
editing and, after every poll, the tree must equal what a full listing shows.
"""

from __future__ import annotations

import random
import sqlite3
import time
from datetime import timedelta
from functools import partial

import pytest
import trio
import trio.testing

# ruff: noqa: F811  (pytest fixtures imported from test_sync_engine are arguments here)
from test_sync_engine import Engine, eng, make_engine  # noqa: F401

from memfs.sync import feed as feed_module


def count_requests(eng: Engine) -> dict[str, int]:
    counts = {"versions": 0, "list": 0, "get": 0}
    originals = {"versions": eng.client.list_versions_page, "list": eng.client.list_memories_page,
                 "get": eng.client.get_memory}

    def wrap(kind):
        async def counted(*a, **kw):
            counts[kind] += 1
            return await originals[kind](*a, **kw)
        return counted

    eng.client.list_versions_page = wrap("versions")
    eng.client.list_memories_page = wrap("list")
    eng.client.get_memory = wrap("get")
    return counts


class Clock:
    """The feed's monotonic clock, stopped, but for the time skipped: LOOKBACK passes
    without waiting, and what the feed decides does not hang on how fast the test runs
    (the real time that passes meanwhile only makes it more careful)."""

    def __init__(self) -> None:
        self.start, self.skipped = time.monotonic(), 0.0

    def __call__(self) -> float:
        return self.start + self.skipped

    def skip(self, seconds: float) -> None:
        self.skipped += seconds


def fake_clock(eng: Engine) -> Clock:
    clock = Clock()
    eng.reconciler.feed.clock = clock
    return clock


LOOKBACK_S = feed_module.LOOKBACK.total_seconds()


def last_cost(eng: Engine) -> feed_module.PollCost:
    return eng.reconciler.feed.costs[-1]


def backdate(eng: Engine, version_id: str, memory_id: str, when) -> None:
    """Make a version look committed out of order: created at `when`, earlier than
    versions the feed already read (what a distributed service may do, within the
    lookback). The server's own SQLite file, edited beside it; the memory's
    updated_at follows when the version is its head."""
    conn = sqlite3.connect(eng.server.db)
    try:
        stamp = feed_module.format_time(when)
        conn.execute("UPDATE versions SET created_at = ? WHERE id = ?", (stamp, version_id))
        conn.execute("UPDATE memories SET updated_at = ? WHERE id = ? AND version_id = ?",
                     (stamp, memory_id, version_id))
        conn.commit()
    finally:
        conn.close()


async def newest_version(eng: Engine):
    async for v in eng.other.list_versions(eng.store_id, limit=1):
        return v
    raise AssertionError("no version")


async def anchored(eng: Engine) -> None:
    """A full listing anchors the feed; later passes poll it."""
    await eng.reconcile()
    assert eng.reconciler.feed.trusted()


def safety_net_due(eng: Engine) -> None:
    """The last full listing `full_resync` seconds back: the next pass is the safety
    net. Relative to it, not `last_full = 0.0`: that is `time.monotonic()`'s zero, the
    machine's boot, under `full_resync` ago on a machine up less than 10 minutes (a
    fresh CI runner), where the pass was then a feed poll."""
    eng.reconciler.last_full -= eng.ctx.options.full_resync


async def tree(eng: Engine) -> dict[str, tuple[str | None, str]]:
    return {eng.state.path_of(n): (n.memory_id, n.sha) for n in eng.state.files()}


async def server_view(eng: Engine) -> dict[str, tuple[str, str]]:
    out = {}
    async for m in eng.other.list_memories(eng.store_id, view="basic", limit=100):
        out[m.path] = (m.id, m.content_sha256)
    return out


async def test_an_idle_poll_is_one_small_request(eng):
    """A quiet store (its newest writes settled): one request, an empty page."""
    clock = fake_clock(eng)
    for i in range(30):
        await eng.other.create_memory(eng.store_id, f"/d{i % 3}/n{i}.md", f"{i}\n")
    await anchored(eng)
    clock.skip(LOOKBACK_S + 1)   # the store stays unwritten past the lookback
    await eng.reconcile()        # the window settles: its 30 versions read once
    assert 30 <= last_cost(eng).versions <= 31  # (and the head's own again)
    counts = count_requests(eng)
    for _ in range(3):
        await eng.reconcile()
        assert last_cost(eng).requests == 1 and last_cost(eng).versions == 0
        assert last_cost(eng).bytes <= 100
    assert counts == {"versions": 3, "list": 0, "get": 0}


async def test_a_store_whose_newest_write_is_alone_in_its_window_is_one_request(eng):
    """The usual idle store: its newest write has no other within the lookback. The
    listing says so (one memory changed in the window): every poll is one request,
    the newest version and then an empty page."""
    clock = fake_clock(eng)
    a = await eng.other.create_memory(eng.store_id, "/a.md", "a\n")
    backdate(eng, a.memory_version_id, a.id,
             feed_module.parse_time(a.created_at) - 2 * feed_module.LOOKBACK)
    await eng.other.create_memory(eng.store_id, "/b.md", "b\n")
    await anchored(eng)
    counts = count_requests(eng)
    await eng.reconcile()
    assert counts == {"versions": 1, "list": 0, "get": 0}
    assert last_cost(eng).versions == 1 and last_cost(eng).bytes <= 1024
    clock.skip(LOOKBACK_S + 1)
    await eng.reconcile()
    await eng.reconcile()
    assert counts == {"versions": 3, "list": 0, "get": 0}
    assert last_cost(eng).bytes <= 100


async def test_our_own_writes_cost_no_reads(eng):
    await anchored(eng)
    await eng.write("/a.md", b"mine\n")
    await eng.push()
    counts = count_requests(eng)
    await eng.reconcile()  # the feed shows our create: exactly our base, nothing to read
    assert counts == {"versions": 1, "list": 0, "get": 0}


async def test_merge_rows_through_the_feed(eng):
    await eng.write("/clean.md", b"c1\n")
    await eng.write("/dirty.md", b"d1\n")
    await eng.write("/moved.md", b"m\n")
    await eng.write("/gone.md", b"g\n")
    await eng.push()
    ids = {p: eng.fs.node(p).memory_id for p in ("/clean.md", "/dirty.md", "/moved.md",
                                                   "/gone.md")}
    await anchored(eng)
    await eng.write("/dirty.md", b"d2 mine\n")                        # pending
    await eng.other.update_memory(eng.store_id, ids["/clean.md"], content="c2 theirs\n")
    await eng.other.update_memory(eng.store_id, ids["/dirty.md"], content="d2 theirs\n")
    await eng.other.update_memory(eng.store_id, ids["/moved.md"], path="/sub/moved.md")
    await eng.other.delete_memory(eng.store_id, ids["/gone.md"])
    new = await eng.other.create_memory(eng.store_id, "/new.md", "n\n")
    counts = count_requests(eng)
    await eng.reconcile()
    assert counts["list"] == 0  # all of it from the feed
    assert await eng.read("/clean.md") == b"c2 theirs\n"              # changed | clean
    assert await eng.read("/dirty.md") == b"d2 theirs\n"              # changed | dirty
    [row] = eng.state.conflicts()
    assert eng.cache.get(row["local_sha"]) == b"d2 mine\n"
    assert eng.fs.node("/sub/moved.md").memory_id == ids["/moved.md"]  # renamed
    assert eng.state.lookup_path("/moved.md") is None
    assert eng.state.lookup_path("/gone.md") is None                  # deleted | clean
    assert eng.fs.node("/new.md").memory_id == new.id                 # new
    assert eng.ctx.status.feed_missed == 0


async def test_rename_and_recreate_at_the_same_path(eng):
    await eng.write("/a.md", b"old\n")
    await eng.push()
    old = eng.fs.node("/a.md").memory_id
    await anchored(eng)
    await eng.other.update_memory(eng.store_id, old, path="/b.md")
    new = await eng.other.create_memory(eng.store_id, "/a.md", "new at a\n")
    await eng.other.delete_memory(eng.store_id, new.id)
    again = await eng.other.create_memory(eng.store_id, "/a.md", "again at a\n")
    await eng.reconcile()
    assert await tree(eng) == {p: v for p, v in (await server_view(eng)).items()}
    assert eng.fs.node("/a.md").memory_id == again.id
    assert eng.fs.node("/b.md").memory_id == old


async def test_two_writes_in_the_same_second_newest_wins(eng):
    created = await eng.other.create_memory(eng.store_id, "/a.md", "v1\n")
    await anchored(eng)
    await eng.other.update_memory(eng.store_id, created.id, content="v2\n")
    await eng.other.update_memory(eng.store_id, created.id, content="v3\n")
    await eng.reconcile()
    assert await eng.read("/a.md") == b"v3\n"


async def test_a_gap_longer_than_retention_forces_a_full_listing(eng, monkeypatch):
    await anchored(eng)
    monkeypatch.setattr(feed_module, "RETENTION", feed_module.timedelta(seconds=0))
    counts = count_requests(eng)
    await eng.reconcile()
    assert counts["list"] >= 1  # listed, not polled


async def test_a_failed_poll_falls_back_to_a_full_listing(eng):
    await anchored(eng)
    orig = eng.client.list_versions_page

    async def broken(*a, **kw):
        raise RuntimeError("the feed broke")

    eng.client.list_versions_page = broken
    try:
        await eng.reconcile()
    except RuntimeError:
        pass
    assert not eng.reconciler.feed.trusted()
    eng.client.list_versions_page = orig
    counts = count_requests(eng)
    await eng.reconcile()
    assert counts["list"] >= 1 and eng.reconciler.feed.trusted()


async def test_the_feed_survives_a_server_restart(eng, server):
    created = await eng.other.create_memory(eng.store_id, "/a.md", "v1\n")
    await anchored(eng)
    server.restart()
    await eng.other.update_memory(eng.store_id, created.id, content="after restart\n")
    counts = count_requests(eng)
    await eng.reconcile()
    assert counts["list"] == 0
    assert await eng.read("/a.md") == b"after restart\n"


async def test_feed_and_full_listing_agree_under_random_edits(eng):
    """Another client keeps creating, editing, renaming and deleting; after every
    feed poll the tree equals a full listing, and the periodic full listings (the
    safety net) never find anything the feed missed."""
    rng = random.Random(1313)
    eng.ctx.options.full_resync = 0.5
    await anchored(eng)
    live: dict[str, str] = {}
    paths = [f"/{d}/{n}.md" for d in ("a", "b", "c") for n in range(4)]
    for step in range(60):
        for _ in range(rng.randint(0, 3)):
            free = [p for p in paths if p not in live.values()]
            action = rng.choice(["create", "edit", "rename", "delete"])
            if action == "create" or not live:
                if free:
                    path = rng.choice(free)
                    m = await eng.other.create_memory(eng.store_id, path, f"{step}\n")
                    live[m.id] = path
            elif action == "edit":
                mid = rng.choice(sorted(live))
                await eng.other.update_memory(eng.store_id, mid, content=f"{step} {mid}\n")
            elif action == "rename" and free:
                mid = rng.choice(sorted(live))
                live[mid] = rng.choice(free)
                await eng.other.update_memory(eng.store_id, mid, path=live[mid])
            elif action == "delete":
                mid = rng.choice(sorted(live))
                await eng.other.delete_memory(eng.store_id, mid)
                del live[mid]
        if step % 10 == 9:
            time.sleep(0.5)  # let a safety-net full listing fall due now and then
        await eng.reconcile()
        assert await tree(eng) == await server_view(eng), f"step {step}"
    assert eng.ctx.status.feed_missed == 0
    assert eng.ctx.status.last_full_listing_at is not None


async def _a_change_the_feed_missed(eng) -> None:
    """/a.md changed by another writer in a version the feed never delivers (committed
    out of order, beyond the lookback: the feed takes it as already read), the feed then
    settled past it (confirmed)."""
    clock = fake_clock(eng)
    a = await eng.other.create_memory(eng.store_id, "/a.md", "a1\n")
    await anchored(eng)
    await eng.other.update_memory(eng.store_id, a.id, content="a2, never in the feed\n")
    feed = eng.reconciler.feed
    async for v in eng.other.list_versions(eng.store_id):
        feed.seen[v.id] = feed_module.parse_time(v.created_at)
    time.sleep(0.01)
    await eng.other.create_memory(eng.store_id, "/later.md", "moves the feed on\n")
    await eng.reconcile()                          # the feed: only /later.md
    assert eng.state.lookup_path("/later.md") is not None
    clock.skip(LOOKBACK_S + 1)
    await eng.reconcile()                          # all of it settled: confirmed
    assert eng.ctx.status.feed_missed == 0


async def test_the_safety_net_counts_what_the_feed_missed(eng):
    """The counter that must stay 0 can count: a change the feed never delivered is
    found, applied and counted by the next full listing."""
    await _a_change_the_feed_missed(eng)
    listed = eng.ctx.status.last_full_listing_at
    safety_net_due(eng)
    await eng.reconcile()
    assert eng.ctx.status.last_full_listing_at != listed  # a listing, not a poll
    assert await eng.read("/a.md") == b"a2, never in the feed\n"
    assert eng.ctx.status.feed_missed == 1


async def test_a_full_listing_asked_for_is_not_the_safety_net(eng):
    """A full listing asked for (the control socket's `sync` with `full`) is not there
    to check the feed: it applies the change and counts nothing (the safety net does)."""
    await _a_change_the_feed_missed(eng)
    await eng.reconciler.reconcile_pass(full=True)
    assert await eng.read("/a.md") == b"a2, never in the feed\n"
    assert eng.ctx.status.feed_missed == 0


async def test_an_idle_poll_after_a_burst_stays_small(eng):
    """A burst of writes just before the store goes quiet: the poll after the one that
    read it costs the head (the newest version) and the empty slice that settled
    since: well under 1 KiB. When the burst settles, its versions are read once more
    (the only place a write committed out of order can hide), then one request with
    an empty page."""
    clock = fake_clock(eng)
    await anchored(eng)
    for i in range(150):
        await eng.other.create_memory(eng.store_id, f"/burst/n{i:03}.md", f"{i}\n")
    await eng.reconcile()                     # applies the burst (2 pages of versions)
    assert last_cost(eng).versions == 150
    counts = count_requests(eng)
    for _ in range(3):
        await eng.reconcile()                 # idle, the burst not settled yet
        assert last_cost(eng).requests <= 2 and last_cost(eng).bytes <= 1024
    assert counts["versions"] <= 6 and counts["list"] == counts["get"] == 0
    clock.skip(LOOKBACK_S + 1)
    await eng.reconcile()                     # the burst settles: read once more
    assert last_cost(eng).requests <= 3 and last_cost(eng).late == 0
    await eng.reconcile()
    assert last_cost(eng).requests == 1 and last_cost(eng).versions == 0
    assert counts["list"] == counts["get"] == 0
    assert len(eng.state.lookup_path("/burst").children) == 150


async def test_a_shorter_lookback_settles_a_burst_that_much_sooner(make_engine):
    """`--feed-lookback 2` (SyncOptions.feed_lookback, which a benchmark sets so as not to
    sit through 30 s of the feed's clock): a burst is read once more, and the polls are
    back to one request, 2 s after it by the server's clock, not 30; before that, it is
    not."""
    eng = await make_engine(feed_lookback=2.0)
    assert eng.reconciler.feed.lookback == timedelta(seconds=2)
    clock = fake_clock(eng)
    await anchored(eng)
    for i in range(20):
        await eng.other.create_memory(eng.store_id, f"/burst/n{i:02}.md", f"{i}\n")
    await eng.reconcile()                     # applies the burst
    assert last_cost(eng).versions == 20
    clock.skip(1.0)
    await eng.reconcile()                     # 1 s on: still unsettled
    assert last_cost(eng).versions < 20
    clock.skip(2.0)
    await eng.reconcile()                     # 3 s on: the burst settles, read once more
    assert last_cost(eng).versions >= 20 and last_cost(eng).late == 0
    await eng.reconcile()
    assert last_cost(eng).requests == 1 and last_cost(eng).versions == 0
    assert len(eng.state.lookup_path("/burst").children) == 20


async def test_the_first_poll_after_a_listing_does_not_relist_a_recent_burst(eng,
                                                                              monkeypatch):
    """Writes made just before the full listing are in the listing. The polls after it
    do not read them (the head starts at the listing); when they settle they are read
    once, found applied, and neither re-read nor counted toward the limit (120
    versions against a limit of 50 that would otherwise send it back to listing)."""
    monkeypatch.setattr(feed_module, "MAX_VERSIONS", 50)
    clock = fake_clock(eng)
    for i in range(120):
        await eng.other.create_memory(eng.store_id, f"/seed/n{i:03}.md", f"{i}\n")
    await anchored(eng)
    counts = count_requests(eng)
    await eng.reconcile()
    # The head, and the slice settled since (none while the clock stands still).
    assert counts["versions"] <= 2 and counts["list"] == counts["get"] == 0
    # The head starts back by the time the listing took: the last few writes, once.
    assert last_cost(eng).versions < 30
    clock.skip(LOOKBACK_S + 1)
    await eng.reconcile()                     # the window settles: its 120, once
    assert counts["list"] == 0 and counts["get"] == 0
    assert last_cost(eng).versions >= 120 and last_cost(eng).late == 0
    counts.update(versions=0)
    await eng.reconcile()
    assert counts == {"versions": 1, "list": 0, "get": 0}


async def test_a_listing_window_of_edits_settles_without_reads(eng):
    """Memories edited several times just before the listing: when that window
    settles, its versions are read once and found no newer than what the listing
    showed: no GET for any of them."""
    clock = fake_clock(eng)
    for i in range(10):
        m = await eng.other.create_memory(eng.store_id, f"/e/n{i}.md", "v0\n")
        for k in range(1, 4):
            await eng.other.update_memory(eng.store_id, m.id, content=f"v{k}\n")
    await anchored(eng)
    counts = count_requests(eng)
    await eng.reconcile()
    clock.skip(LOOKBACK_S + 1)
    await eng.reconcile()
    assert last_cost(eng).versions >= 40
    assert counts["get"] == 0 and counts["list"] == 0
    assert await tree(eng) == await server_view(eng)


async def test_memories_created_and_deleted_elsewhere_cost_no_reads(eng):
    """Another client's short-lived memories (created and deleted between two polls,
    or before the mount) are nothing to this mount: no GET each."""
    await anchored(eng)
    for i in range(30):
        m = await eng.other.create_memory(eng.store_id, f"/tmp/n{i}.md", f"{i}\n")
        await eng.other.delete_memory(eng.store_id, m.id)
    counts = count_requests(eng)
    await eng.reconcile()
    assert counts["get"] == 0 and counts["list"] == 0
    assert eng.state.lookup_path("/tmp") is None


@pytest.mark.parametrize("first", ["loop", "first listing"])
async def test_mount_start_is_one_listing_and_the_poll_waits_its_turn(eng, first):
    """At mount the reconciler's loop and the first listing (StoreEngine.first_listing)
    start together and queue on the sync lock. Whichever gets it lists the store; the
    other finds that pass done and does nothing, so the first feed poll comes a poll
    interval later instead of paging through the store's recent versions (a burst of
    writes just before the mount) the moment the listing ends, while the first
    commands run in the mount. A `sync` request still makes a pass of its own."""
    for i in range(30):
        await eng.other.create_memory(eng.store_id, f"/d{i % 3}/n{i}.md", f"{i}\n")
    counts = count_requests(eng)
    async with trio.open_nursery() as nursery:
        async with eng.ctx.sync_lock:  # a push pass under way: both wait for the lock
            tasks = {"loop": eng.reconciler.run,
                     "first listing": partial(eng.reconciler.reconcile_pass, coalesce=True)}
            for name in (first, *(n for n in tasks if n != first)):
                nursery.start_soon(tasks[name])
                await trio.testing.wait_all_tasks_blocked()  # queued in this order
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(5):
            while eng.reconciler.last_pass is None:
                await trio.sleep(0.01)
        await trio.sleep(eng.ctx.options.poll_interval / 2)
        assert counts == {"versions": 1, "list": 4, "get": 0}  # head, root + 3 directories
        assert len(eng.state.by_memory) == 30
        with trio.fail_after(5):  # the loop's own turn: one feed poll (head and slice)
            while not eng.reconciler.feed.costs:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert counts == {"versions": 3, "list": 4, "get": 0}
    await eng.reconciler.reconcile_pass()  # `memfs sync`: never coalesced
    assert counts["versions"] > 3 and counts["list"] == 4


async def test_a_root_write_between_the_root_listing_and_the_head_is_not_lost(eng):
    """The feed's position is read alongside the root's listing (one round trip less
    before a mount is usable): writes that land after the root was listed but before
    the position was read are in neither. The head starts back by the time the
    listing took, so the first poll still brings them, at once."""
    import trio

    listed = trio.Event()
    list_page, head = eng.client.list_memories_page, eng.reconciler.feed.head

    async def root_then_writes(*a, **kw):
        page = await list_page(*a, **kw)
        if kw.get("depth") == 1 and not listed.is_set():
            await eng.other.create_memory(eng.store_id, "/late-root.md", "missed\n")
            time.sleep(0.01)
            await eng.other.create_memory(eng.store_id, "/d/newer.md", "moves the head\n")
            listed.set()
        return page

    async def head_after_the_root():
        await listed.wait()
        return await head()

    eng.client.list_memories_page = root_then_writes
    eng.reconciler.feed.head = head_after_the_root
    await eng.reconcile()
    assert eng.state.lookup_path("/late-root.md") is None  # on no listing
    eng.client.list_memories_page = list_page
    counts = count_requests(eng)
    await eng.reconcile()                          # a feed poll, not a listing
    assert counts["list"] == 0 and last_cost(eng).late == 0
    assert eng.reconciler.feed.trusted()
    assert await eng.read("/late-root.md") == b"missed\n"
    assert await eng.read("/d/newer.md") == b"moves the head\n"


# -- writes committed out of order (issue 22) -------------------------------------------


@pytest.mark.parametrize("window", ["sparse", "dense"])
@pytest.mark.parametrize("late_by", [0.001, LOOKBACK_S - 5.0])
async def test_a_version_committed_out_of_order_is_caught_by_the_feed(eng, window, late_by):
    """Another writer's create and edit commit after the feed read a newer version,
    created up to the lookback before it. The head does not see them (older than it).
    While the unsettled window holds few versions, the one request a poll makes reads
    all of it: they come with the next poll. Otherwise the settling read finds them
    once their time is final: at most LOOKBACK (plus a poll) after the feed read the
    newer version. No full listing is involved, and the safety net finds nothing the
    feed missed."""
    clock = fake_clock(eng)  # skipped only where no write follows (the server's does not)
    x = await eng.other.create_memory(eng.store_id, "/x.md", "x1\n")
    backdate(eng, x.memory_version_id, x.id,  # long settled: no window left unread
             feed_module.parse_time(x.created_at) - 2 * feed_module.LOOKBACK)
    await anchored(eng)
    if window == "dense":
        for i in range(5):
            await eng.other.create_memory(eng.store_id, f"/w/n{i}.md", f"{i}\n")
    newer = await eng.other.create_memory(eng.store_id, "/newer.md", "n\n")
    await eng.reconcile()                          # the feed's head passes /newer.md
    assert eng.state.lookup_path("/newer.md") is not None
    when = feed_module.parse_time(newer.created_at) - feed_module.timedelta(seconds=late_by)
    late = await eng.other.create_memory(eng.store_id, "/late.md", "late create\n")
    backdate(eng, late.memory_version_id, late.id, when)
    edit = await eng.other.update_memory(eng.store_id, x.id, content="x2, late edit\n")
    backdate(eng, edit.memory_version_id, x.id,
             when + feed_module.timedelta(microseconds=1))
    counts = count_requests(eng)
    if window == "dense":  # the bounded delay: not before its time is final...
        clock.skip(LOOKBACK_S - late_by - 2)
        await eng.reconcile()
        assert eng.state.lookup_path("/late.md") is None
        assert last_cost(eng).late == 0
        clock.skip(2 + eng.ctx.options.poll_interval)
    await eng.reconcile()                          # ...and no later
    assert last_cost(eng).late == 2
    assert counts["list"] == 0                     # the feed, not a listing
    assert await eng.read("/late.md") == b"late create\n"
    assert await eng.read("/x.md") == b"x2, late edit\n"
    assert eng.ctx.status.feed_missed == 0
    listed = eng.ctx.status.last_full_listing_at
    safety_net_due(eng)                            # the safety net: nothing missed
    await eng.reconcile()
    assert eng.ctx.status.last_full_listing_at != listed
    assert eng.ctx.status.feed_missed == 0
    assert await tree(eng) == await server_view(eng)


async def test_our_own_writes_are_known_by_their_version_ids(eng, monkeypatch):
    """A burst of our own writes (more than a listing's worth of news) is skipped by
    id: no read, no fallback to a full listing; the poll's cost counts them as ours."""
    monkeypatch.setattr(feed_module, "MAX_VERSIONS", 5)
    await anchored(eng)
    for i in range(20):
        await eng.write(f"/own{i:02}.md", f"{i}\n".encode())
    await eng.write("/own00.md", b"again\n")
    await eng.push()
    assert len(eng.reconciler.feed.own) == 20
    counts = count_requests(eng)
    await eng.reconcile()
    assert counts["list"] == 0 and counts["get"] == 0
    assert last_cost(eng).own == 20 and last_cost(eng).late == 0


async def test_feed_catches_out_of_order_commits_under_random_edits(eng):
    """Another client keeps creating, editing, renaming and deleting, and some of its
    writes commit out of order (created up to the lookback before the newest version
    already committed). Once the lookback has passed, the tree equals a full listing;
    the safety net, run now and then, never finds anything the feed missed; and the
    late versions were read by the feed."""
    lookback = 0.6
    eng.reconciler.feed.lookback = feed_module.timedelta(seconds=lookback)
    rng = random.Random(2222)
    eng.ctx.options.full_resync = 1.5
    await anchored(eng)
    live: dict[str, str] = {}
    last_at: dict[str, feed_module.datetime] = {}  # memory -> its newest version's time
    paths = [f"/{d}/{n}.md" for d in ("a", "b", "c") for n in range(4)]
    backdated = 0
    for step in range(60):
        for _ in range(rng.randint(0, 3)):
            free = [p for p in paths if p not in live.values()]
            action = rng.choice(["create", "edit", "rename", "delete"])
            mid = rng.choice(sorted(live)) if live else None
            if action == "create" or mid is None:
                if not free:
                    continue
                path = rng.choice(free)
                m = await eng.other.create_memory(eng.store_id, path, f"{step}\n")
                mid, live[m.id] = m.id, path
            elif action == "edit":
                await eng.other.update_memory(eng.store_id, mid, content=f"{step} {mid}\n")
            elif action == "rename" and free:
                live[mid] = rng.choice(free)
                await eng.other.update_memory(eng.store_id, mid, path=live[mid])
            elif action == "delete":
                await eng.other.delete_memory(eng.store_id, mid)
                del live[mid]
            else:
                continue
            v = await newest_version(eng)
            at = feed_module.parse_time(v.created_at)
            if rng.random() < 0.4:  # committed out of order, within the lookback
                floor = last_at.get(mid, at - feed_module.timedelta(seconds=lookback))
                earliest = max(floor + feed_module.timedelta(microseconds=1),
                               at - feed_module.timedelta(seconds=lookback * 0.8))
                if earliest < at:
                    at = earliest + (at - earliest) * rng.random()
                    backdate(eng, v.id, mid, at)
                    backdated += 1
            last_at[mid] = at
        await eng.reconcile()
        if step % 5 == 4:
            time.sleep(lookback + 0.1)  # everything committed is final now
            await eng.reconcile()
            assert await tree(eng) == await server_view(eng), f"step {step}"
    assert eng.ctx.status.feed_missed == 0
    assert eng.ctx.status.last_full_listing_at is not None
    assert backdated > 10 and eng.reconciler.feed.late > 0


async def test_a_full_listing_frees_the_path_of_a_deleted_memory_first(eng):
    """Between two listings another client deletes a memory and creates a new one at
    its path (what a safety-net listing meets when the delete's version is still to
    come through the feed): the new memory is shown by that listing, not reported as
    colliding with the deleted one's file."""
    old = await eng.other.create_memory(eng.store_id, "/a.md", "old\n")
    await anchored(eng)
    await eng.other.delete_memory(eng.store_id, old.id)
    new = await eng.other.create_memory(eng.store_id, "/a.md", "new\n")
    await eng.reconciler.reconcile_pass(full=True)
    assert eng.fs.node("/a.md").memory_id == new.id
    assert await tree(eng) == await server_view(eng)


async def test_a_poll_counts_its_own_requests_only(eng):
    """What a poll cost (memfs status) is its own requests and bytes, though other tasks
    use the same client meanwhile (pushes, fetches)."""
    for i in range(5):
        await eng.other.create_memory(eng.store_id, f"/n{i}.md", f"{i}\n")
    await anchored(eng)
    counts = count_requests(eng)

    async def others() -> None:
        for _ in range(10):
            await eng.client.list_memories_page(eng.store_id, view="basic", limit=100)
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(others)
        await eng.reconcile()
    assert counts["list"] == 10
    assert last_cost(eng).requests == counts["versions"] >= 1
    assert 0 < last_cost(eng).bytes < 4096


async def test_a_memory_to_recheck_is_named_by_the_next_poll_only(eng):
    """`Feed.recheck`: the next poll names the memory whatever its versions say (a
    change no base matches: the reconciler re-reads it), once; a listing, which reads
    every memory's head, clears it."""
    await eng.write("/a.md", b"one\n")
    await eng.push()
    await anchored(eng)
    feed = eng.reconciler.feed
    mid = eng.fs.node("/a.md").memory_id
    assert [c.memory_id for c in await feed.poll()] == []  # quiet: nothing named
    feed.recheck(mid)
    assert [(c.memory_id, c.path, c.sha) for c in await feed.poll()] == [(mid, None, None)]
    assert await feed.poll() == []  # once
    feed.recheck(mid)
    await eng.reconciler.reconcile_pass(full=True)
    assert feed.rechecks == set() and await feed.poll() == []


# -- wave r6w4 --


async def test_a_listing_after_a_burst_is_not_the_safety_net(eng, monkeypatch):
    """A poll that meets a burst (more news than a listing costs) lists the store instead:
    that listing is there to be cheaper, not to check the feed. It applies a change the
    feed never delivered and counts nothing (only the safety net counts)."""
    await _a_change_the_feed_missed(eng)
    monkeypatch.setattr(feed_module, "MAX_VERSIONS", 2)
    confirmed = eng.reconciler.feed.confirmed
    for i in range(3):  # (after the settled edge, which the skipped clock put ahead)
        m = await eng.other.create_memory(eng.store_id, f"/burst/n{i}.md", f"{i}\n")
        backdate(eng, m.memory_version_id, m.id, confirmed + timedelta(seconds=1 + i))
    listings = eng.reconciler.last_full
    await eng.reconcile()
    assert eng.reconciler.last_full != listings  # the burst sent it to a full listing
    assert await eng.read("/a.md") == b"a2, never in the feed\n"
    assert len(eng.state.lookup_path("/burst").children) == 3
    assert eng.ctx.status.feed_missed == 0
