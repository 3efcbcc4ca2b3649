"""What the pusher and the reconciler share (memfs/sync/common.py), one call at a time: the
backoff's schedule, going offline, the warnings `memfs status` shows, the writer learned,
and a conflict settled against the in-process server. In-process and deterministic (the
jitter's draw is replaced by its bounds), so mutmut runs them: each pins mutants of
common.py that no test killed (docs/TESTING.md, "Mutation testing").
"""

from __future__ import annotations

import logging
import re
import time

import pytest
import trio
from interleave import OTHER
from onepass import data, harness, synced

from memfs.api import errors as api_errors
from memfs.state.blobs import BlobCache, sha256
from memfs.state.state import ROOT_INO, State
from memfs.sync import common
from memfs.sync.common import WRITER_KEY, Backoff, SyncContext, SyncOptions, SyncStatus
from memfs.sync.events import Subscriber


@pytest.fixture
def draws(monkeypatch) -> list[tuple[float, float]]:
    """Every jitter draw's bounds; each draw gives its upper bound (the longest wait)."""
    seen: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        seen.append((low, high))
        return high

    monkeypatch.setattr(common.random, "uniform", uniform)
    return seen


def test_the_backoff_doubles_from_its_base_to_its_cap_and_starts_over_when_reset(draws):
    b = Backoff(base=1.0, cap=8.0)
    assert [b.next_delay() for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert draws == [(0, 1.0), (0, 2.0), (0, 4.0), (0, 8.0), (0, 8.0)]  # full jitter
    assert b.failures == 5
    b.reset()
    assert b.next_delay() == 1.0


def test_the_backoff_keeps_its_cap_after_any_number_of_failures(draws):
    """A mount whose server is unreachable for an hour (the reconciler probes once a
    poll, every 2 s by default; the pusher backs off beside it) counts thousands of
    failures: each still waits up to the cap. (The
    doubling once overflowed a float at the 1,025th, and every loop that backed off
    then failed instead.)"""
    b = Backoff(base=1.0, cap=60.0)
    assert [b.next_delay() for _ in range(5000)][-3:] == [60.0, 60.0, 60.0]
    assert b.failures == 5000 and draws[-1] == (0, 60.0)


def test_the_servers_retry_after_wins_only_when_it_is_longer(draws):
    b = Backoff(base=1.0, cap=8.0)
    assert b.next_delay(retry_after=30.0) == 30.0
    assert b.next_delay(retry_after=0.5) == 2.0  # the second failure's own wait is longer


def _context(tmp_path, **options) -> SyncContext:
    """A context as the engine makes one, without a server (nothing here sends)."""
    state = State(tmp_path / "state.db")
    return SyncContext(state, BlobCache(tmp_path / "objects"), None, "memstore_x",
                       SyncOptions(**{"poll_interval": 1.0, **options}))


@pytest.mark.parametrize("poll_interval,cap", [(1.0, 10.0), (5.0, 20.0), (30.0, 60.0)])
def test_offline_the_mount_probes_every_few_poll_intervals_at_least_every_minute(
        tmp_path, poll_interval, cap):
    """The backoff's cap: four poll intervals, no less than 10 s and no more than 60 s."""
    ctx = _context(tmp_path, poll_interval=poll_interval)
    assert ctx.backoff.cap == cap
    ctx.state.close()


async def test_a_context_counts_on_the_wall_clock_and_fetches_as_many_as_it_pushes(tmp_path):
    """Outside the interleaving harness (which moves a clock of its own): the lost-answer
    wait is counted on the wall clock and waited out with trio's sleep; the blob writer
    fetches as many contents at once as the pusher sends requests."""
    ctx = _context(tmp_path, push_concurrency=3)
    assert abs(ctx.wall() - time.time()) < 60
    with trio.move_on_after(0.01) as waited:
        await ctx.pause(10)
    assert waited.cancelled_caught
    assert ctx.fetcher.limiter.total_tokens == 3
    ctx.state.close()


def test_going_offline_says_so_once_and_keeps_when_it_began(tmp_path, draws, caplog,
                                                            monkeypatch):
    caplog.set_level(logging.WARNING, logger="memfs.sync.common")
    ctx = _context(tmp_path)
    monkeypatch.setattr(common.time, "time", lambda: 1000.0)
    slow = api_errors.RateLimitError("slow down", status=429, retry_after=7.0)
    assert ctx.went_offline(slow) == 7.0  # the server's hint, longer than the first wait
    reason = ctx.status.offline_reason
    assert "429" in reason and ctx.status.last_error == reason
    assert ctx.status.online is False and ctx.status.offline_since == 1000.0
    monkeypatch.setattr(common.time, "time", lambda: 1060.0)
    assert ctx.went_offline(api_errors.APIConnectionError("refused")) == 2.0
    assert ctx.status.offline_since == 1000.0  # offline since the first failure
    assert ctx.state.get_meta("last_error") == ctx.status.last_error != reason
    assert [r.getMessage() for r in caplog.records] == [f"offline: {reason}"]  # once
    ctx.state.close()


def test_coming_back_online_wakes_the_pusher_once_and_forgets_the_outage(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="memfs.sync.common")
    ctx = _context(tmp_path)
    ctx.went_offline(api_errors.APIConnectionError("refused"))
    woke = ctx.online_wakeup
    ctx.came_online()
    assert woke.is_set()  # the pusher waiting out its backoff goes now
    waiting = ctx.online_wakeup
    assert waiting is not woke and not waiting.is_set()  # the next outage's
    assert (ctx.status.online, ctx.status.offline_reason, ctx.status.offline_since) == (
        True, None, None)
    assert ctx.backoff.failures == 0
    ctx.came_online()  # a pass that succeeds while online: nothing to wake, nothing said
    assert ctx.online_wakeup is waiting and not waiting.is_set()
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert said == ["back online"]
    ctx.state.close()


def test_a_note_said_again_moves_to_the_end_with_its_time_and_fifty_are_kept(caplog):
    caplog.set_level(logging.DEBUG, logger="memfs.sync.common")
    status = SyncStatus()
    for i in range(60):
        status.note(f"note {i}")
    status.note("note 30")
    assert len(status.warnings) == 50
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d note \d+", w) for w in status.warnings)
    assert [w.split(" ", 1)[1] for w in status.warnings[-2:]] == ["note 59", "note 30"]
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.getMessage() == "note 30"]
    assert said == [(logging.WARNING, "note 30"), (logging.DEBUG, "note 30")]  # logged once


async def test_the_writer_learned_is_kept_and_not_forgotten_for_a_version_naming_none(
        tmp_path):
    async with harness(tmp_path) as eng:
        ctx = eng.ctx
        ctx.learn_writer({"type": "api_key", "id": "key_1"})
        ctx.learn_writer(None)  # a version with no writer recorded tells nothing
        assert ctx.writer == {"type": "api_key", "id": "key_1"}
        assert ctx._recorded(WRITER_KEY) == ctx.writer  # kept in state.db, for this key


async def test_a_conflict_takes_the_servers_content_and_version_and_says_so(tmp_path):
    """Another writer emptied a.md (content ""), ours was edited: the server's empty
    content takes the tree, with its version as the newest seen; `memfs watch` hears the
    conflict, of that memory and version; the kernel is told the file changed."""
    async with harness(tmp_path) as eng:
        await synced(eng, a="base")
        node = eng.node("/a.md")
        mid = node.memory_id
        eng.db.update_memory(eng.store_id, mid, content="", actor=OTHER)
        version = eng.db.get_memory(eng.store_id, mid)["memory_version_id"]
        await eng.op_write("/a.md", "mine")
        sub = Subscriber()
        eng.ctx.events.attach(sub)
        eng.ctx.take_invalidations()
        cid = await eng.ctx.settle_conflict(node, mid, "changed there", gen=node.gen)
        assert eng.tree_sha("/a.md") == sha256(b"") and node.size == 0
        assert eng.state.seen_version(mid) == version
        event = sub.receive.receive_nowait()
        assert (event.kind, event.store_id, event.path, event.memory_id, event.version_id) \
            == ("conflict", eng.store_id, "/a.md", mid, version)
        assert ("inode", node.ino) in eng.ctx.take_invalidations()
        [row] = eng.state.conflicts()
        assert (row["id"], row["local_sha"]) == (cid, sha256(data("mine")))


async def test_directories_remote_changes_make_or_empty_are_told_to_the_kernel(tmp_path):
    """Another writer created /d/e/x.md: the listing makes d and e here, and the kernel is
    told d's entry in the root changed (its negative lookup is stale); once they delete
    it, the emptied e and d go, and so do their entries."""
    async with harness(tmp_path) as eng:
        await eng.op_r_create("/d/e/x.md", "theirs")
        eng.ctx.take_invalidations()
        await eng.op_reconcile()
        d = eng.node("/d")
        assert ("entry", ROOT_INO, "d") in eng.ctx.take_invalidations()
        e = eng.node("/d/e")
        await eng.op_r_delete("/d/e/x.md")
        await eng.op_reconcile()
        gone = eng.ctx.take_invalidations()
        assert ("entry", d.ino, "e") in gone and ("entry", ROOT_INO, "d") in gone
        assert eng.node("/d") is None and e.ino not in eng.state.nodes


async def test_a_read_waits_for_a_server_that_does_not_answer_a_bounded_time(
        tmp_path, autojump_clock, monkeypatch):
    """A cache miss while the server holds every request (stopped, packets dropped):
    the read gives up after FETCH_WAIT (its handler answers EIO) instead of waiting
    through every attempt's timeout, about three minutes (found by a helper)."""
    ctx = _context(tmp_path)
    never = trio.Event()

    async def read(node):
        await never.wait()

    monkeypatch.setattr(ctx.fetcher, "read", read)
    started = trio.current_time()
    with pytest.raises(OSError, match="did not answer within 30 s"):
        await ctx.fetch(None)
    assert trio.current_time() - started == common.FETCH_WAIT
    ctx.state.close()
